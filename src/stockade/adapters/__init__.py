"""Framework adapters: each module plugs stockade into one agent framework.

Every adapter is an optional extra and imports its framework only when the
adapter itself is imported, so `import stockade` never pays for them:

- `stockade.adapters.openai_agents` -- a `ShellTool` executor for the OpenAI
  Agents SDK (`pip install 'stockade[openai-agents]'`).
- `stockade.adapters.openai_sandbox` -- a sandbox client for the same SDK's
  `SandboxAgent`, whose sessions run every command and file operation in
  stockade (same extra).
- `stockade.adapters.langchain` -- an execution policy for LangChain's
  `ShellToolMiddleware` (`pip install 'stockade[langchain]'`).
- `stockade.adapters.claude_code` -- `stockade hook claude-code`, a PreToolUse
  hook that runs Claude Code's Bash calls in stockade (no extra).
- `stockade.adapters.inspect_sandbox` -- the `stockade` sandbox environment
  provider for Inspect evals (`pip install 'stockade[inspect]'`).
- `stockade.adapters.mini_swe_agent` -- an environment mini-swe-agent's config
  can select (`pip install 'stockade[mini-swe-agent]'`).
- `stockade.adapters.deepagents` -- a sandbox backend for Deep Agents'
  `create_deep_agent` (`pip install 'stockade[deepagents]'`).
"""
