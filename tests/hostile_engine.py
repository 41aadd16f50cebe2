"""A hostile stand-in engine: what a compromised or broken engine may print, then it serves
or fails to start.

``--port P --runs FILE`` (each start appends a line to FILE), then ``--then``:

* ``serve``: print ANSI colour escapes, a carriage return and a fake lemoncore log line,
  then ``--flood N`` numbered lines as fast as it can, then ``real last line``, then answer
  ``GET /health`` and any POST (an OpenAI-shaped chat completion);
* ``exit``: the same output, then exit 1 (a crash report must show the real last lines);
* ``refuse``: print VTE 0.3.7's refusal of a GPU outside its family (Portuguese, as
  ``cli_main`` logs it: /work/shared/reference/vte.md S1) and exit 1, as vte-server does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lemoncore import standin
from lemoncore.standin import answer, head, message, serve

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--runs", type=Path, required=True)
parser.add_argument("--then", choices=("serve", "exit", "refuse"), default="serve")
parser.add_argument("--flood", type=int, default=0)
args = parser.parse_args()
with args.runs.open("a") as runs:
    runs.write("ran\n")

ESC = "\x1b"
FAKE = "2026-01-01T00:00:00.000000Z [error    ] all models unloaded by the administrator"
REFUSAL = (
    "2026-07-17 10:00:00,000 [ERROR] VTE.Server: Falha ao carregar o modelo, encerrando: "
    "VTE_TARGET_ARCH_FAMILY=gfx11, mas nenhum dos 2 devices HIP visíveis pertence a essa "
    "família ([('AMD Radeon RX 9070', 'gfx1201'), ('AMD Radeon RX 7600', 'gfx1102')]). "
    "Recusando escolher uma geração não validada."
)

out = sys.stdout
if args.then == "refuse":
    print(REFUSAL, file=sys.stderr, flush=True)
    sys.exit(1)
out.write(f"{ESC}[31mred{ESC}[0m {ESC}]0;title{ESC}\\ \x07bell\n")
out.write(f"progress 10%\rprogress 100%\n{FAKE}\n")
out.write("".join(f"flood {n}\n" for n in range(args.flood)))
out.write("real last line\n")
out.flush()
if args.then == "exit":
    sys.exit(1)


class Handler(standin.Handler):
    def do_GET(self) -> None:
        self.send_json(200, {"status": "ok"})

    def do_POST(self) -> None:
        self.read_body()
        self.send_json(200, answer(head("h", "hostile", 0), [message("hi")]))


serve(Handler, args.port, exit_on_sigterm=False)
