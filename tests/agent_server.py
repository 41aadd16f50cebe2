"""The server the ``lemon launch`` tests (``test_agents.py``) wire agents to: lemoncore's
app serving echoplugin's chat-only ``echo-words`` (so Anthropic's Messages and OpenAI's
Responses are translated to chat, as for llama.cpp's models), its engine given a context
a coding agent's requests fit in. pi asks for ``max_completion_tokens`` = min(the
model's ``maxTokens``, 32000) (pi-ai ``dist/providers/simple-options.js``
``buildBaseOptions``), 16384 when ``models.json`` gives none (pi-coding-agent
``dist/core/model-registry.js`` ``parseModels``), on top of its system prompt and tools;
the echo engine refuses a prompt and ``max_tokens`` over its ``--ctx-size``.

Run as a script (``agent_server.py --port N``) it serves that app the way ``lemon serve``
does (settings from ``LEMON_*``), with no installed plugin loaded:
``running_server(dir, env, command=(str(SCRIPT),))``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # pytest's importlib mode adds no test dirs
from echoplugin import EchoPlugin, echo_launch, echo_plugin

from lemoncore import Settings, hookimpl
from lemoncore.launch import LaunchContext, LaunchSpec
from lemoncore.recipes import ModelInfo

SCRIPT = Path(__file__)
CTX_SIZE = 1 << 20  # words: room for any agent's prompt and answer budget


class AgentEchoPlugin(EchoPlugin):
    """echoplugin's model, its engine with a context of :data:`CTX_SIZE` words."""

    @hookimpl
    def launch(self, model: ModelInfo, context: LaunchContext) -> LaunchSpec:
        return echo_launch(model, context, "--ctx-size", str(CTX_SIZE))


if __name__ == "__main__":
    from lemoncore import create_app
    from lemoncore.cli import serve_app

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    settings = Settings(port=args.port, plugins_allow="")
    plugin = AgentEchoPlugin(echo_plugin(settings.cache_dir).words)
    serve_app(create_app(settings, plugins={"echo": plugin}))
