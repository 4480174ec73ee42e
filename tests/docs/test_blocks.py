"""The doc tests' parsing of pages (tests/docs/blocks.py, tests/docs/links.py): no
files, no processes."""

from __future__ import annotations

import pytest

from tests.docs.blocks import (
    DEFAULT_TIMEOUT,
    Directive,
    DocTestError,
    Kind,
    console_script,
    parse_blocks,
    rewrite,
    substitute,
)
from tests.docs.links import anchors, problems, slug

PAGE = """# Title

Some text.

```sh
mqadmin topicList -n 127.0.0.1:9876
```

- a list item:

  ```python
  print("indented")
  ```

<!-- doctest: skip (needs a cluster of three) -->
```bash
make cluster
```

````text
```
nested fence shown as output
```
````
"""


def test_blocks_with_lines_languages_and_text() -> None:
    blocks = parse_blocks(PAGE, "docs/p.md")
    assert [(b.line, b.lang, b.kind) for b in blocks] == [
        (5, "sh", Kind.SHELL), (11, "python", Kind.PYTHON), (16, "bash", Kind.SHELL),
        (20, "text", Kind.OUTPUT)]
    assert blocks[0].text == "mqadmin topicList -n 127.0.0.1:9876\n"
    assert blocks[1].text == 'print("indented")\n'            # the list's indent taken off
    assert blocks[2].directive == Directive(skip="needs a cluster of three")
    assert blocks[3].text == "```\nnested fence shown as output\n```\n"
    assert blocks[0].id == "docs/p.md:5"
    assert blocks[0].directive == Directive()


@pytest.mark.parametrize("page, message", [
    ("```\nx\n```\n", "needs a language"),
    ("```json\n{}\n```\n", "language 'json' is not one"),
    ("```sh\nls\n", "never closed"),
    ("<!-- doctest: skip -->\n```sh\nls\n```\n", "'skip' needs a reason"),
    ("<!-- doctest: skip () -->\n```sh\nls\n```\n", "'skip' needs a reason"),
    ("<!-- doctest: until ( -->\n```sh\nls\n```\n", "'until' '\\('"),
    ("<!-- doctest: timeout 0 -->\n```sh\nls\n```\n", "within"),
    ("<!-- doctest: timeout soon -->\n```sh\nls\n```\n", "needs seconds"),
    ("<!-- doctest: daemons tls -->\n```sh\nls\n```\n", "'daemons' is one of"),
    ("<!-- doctest: config redis -->\n```properties\na=b\n```\n", "'config' is one of"),
    ("<!-- doctest: sub \"a\" -->\n```sh\nls\n```\n", "two quoted strings"),
    ("<!-- doctest: needs not a module -->\n```sh\nls\n```\n", "takes a module name"),
    ("<!-- doctest: frobnicate -->\n```sh\nls\n```\n", "unknown doctest directive"),
    ("<!-- doctest: timeout 5 -->\n<!-- doctest: timeout 6 -->\n```sh\nls\n```\n", "twice"),
    ("<!-- doctest: skip (x) -->\n\nprose\n```sh\nls\n```\n", "right above"),
    ("text\n<!-- doctest: skip (x) -->\n", "right above"),
    ("<!-- doctest: skip (x) --> and more\n```sh\nls\n```\n", "one whole line"),
    ("<!-- doctest: skip (x) -->\n```text\nout\n```\n", "never run"),
    ("<!-- doctest: until x -->\n```properties\na=b\n```\n", "for blocks that run"),
    ("<!-- doctest: config namesrv -->\n```sh\nls\n```\n", "for properties/conf/yaml"),
])
def test_what_the_parser_refuses(page: str, message: str) -> None:
    with pytest.raises(DocTestError, match=message):
        parse_blocks(page, "p.md")


def test_directives_stack() -> None:
    page = ('<!-- doctest: until ^ready -->\n<!-- doctest: timeout 90 -->\n'
            '<!-- doctest: daemons acl -->\n<!-- doctest: needs rocketmq.client -->\n'
            '<!-- doctest: sub "-c 200000" "-c 2000" -->\n'
            "<!-- doctest: sub '--port 8080' '--port {free_port}' -->\n"
            "```python\nprint('ready')\n```\n")
    (block,) = parse_blocks(page, "p.md")
    assert block.directive == Directive(
        until="^ready", timeout=90.0, daemons="acl", needs="rocketmq.client",
        subs=(("-c 200000", "-c 2000"), ("--port 8080", "--port {free_port}")))
    assert block.line == 7


def test_config_kinds() -> None:
    page = ("```properties\na=b\n```\n```yaml\na: b\n```\n"
            "<!-- doctest: config namesrv -->\n```conf\na=b\n```\n")
    assert [b.config_kind for b in parse_blocks(page, "p.md")] == ["broker", "acl", "namesrv"]
    assert {b.kind for b in parse_blocks(page, "p.md")} == {Kind.CONFIG}
    assert Directive().timeout == DEFAULT_TIMEOUT


def test_console_script_takes_the_dollar_lines_and_their_continuations() -> None:
    text = ("$ mqadmin statsAll -n 127.0.0.1:9876\n#Topic  #InTPS\nTopicTest  3.50\n"
            "$ mqadmin topicRoute \\\n    -n x -t T\n{\"json\": 1}\n")
    assert console_script(text) == ("mqadmin statsAll -n 127.0.0.1:9876\n"
                                     "mqadmin topicRoute \\\n    -n x -t T\n")
    assert console_script("output only\n") == ""


def test_substitute_fills_placeholders_and_refuses_a_stale_sub() -> None:
    text = "mqbench producer -c 200000\nmqbench consumer -c 200000\nserve --port 8080\n"
    out = substitute(text, [("-c 200000", "-c 2000"), ("--port 8080", "--port {free_port}")],
                     {"free_port": "41234"})
    assert out == "mqbench producer -c 2000\nmqbench consumer -c 2000\nserve --port 41234\n"
    with pytest.raises(DocTestError, match="'-c 9' is not in the block"):
        substitute(text, [("-c 9", "-c 1")], {})


def test_rewrite_longest_first_and_once() -> None:
    repl = {"127.0.0.1:9876": "127.0.0.1:40001", "127.0.0.1:98765": "never",
            "/tmp/": "/tmp/pytest-1/tmp/"}
    text = "ns 127.0.0.1:98765 and 127.0.0.1:9876; out /tmp/x"
    assert rewrite(text, repl) == "ns never and 127.0.0.1:40001; out /tmp/pytest-1/tmp/x"
    assert rewrite("a", {}) == "a"


# ---- links ------------------------------------------------------------------------------


@pytest.mark.parametrize("heading, anchor", [
    ("Installing: the interpreter and the compiled loops",
     "installing-the-interpreter-and-the-compiled-loops"),
    ("Where a single send's time goes", "where-a-single-sends-time-goes"),
    ("`NAMESRV_ADDR`", "namesrv_addr"),
    ("Push consumer: [API](x.md)", "push-consumer-api"),
    ("What differs from RocketMQ", "what-differs-from-rocketmq"),
])
def test_slug(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_anchors_of_repeated_headings_and_not_in_code() -> None:
    text = "# A\n## Tested\n```text\n# Not a heading\n```\n### Tested\n"
    assert anchors(text) == {"a", "tested", "tested-1"}


FILES = {
    "README.md": "# Top\n## Quickstart\n",
    "docs/a.md": "# A\n## Busy polling: latency for CPU\n",
    "docs/security/x.md": "# X\n",
    "protocol/README.md": "# protocol\n",
}
DIRS = {"docs", "docs/security", "docs/screenshots"}


def check(page: str, text: str) -> list[str]:
    return problems(page, text, FILES.get, lambda p: p in DIRS)


def test_links_that_resolve() -> None:
    text = ("# A\n[ops](a.md#busy-polling-latency-for-cpu) [sec](security/x.md) "
            "[dir](security/) [top](../README.md#quickstart) [here](#a) "
            "[proto](../protocol/README.md) [web](https://example.com/x#y) "
            "![shot](screenshots/) `[not](nope.md)`\n"
            "```text\n[inside](nope.md)\n```\n")
    assert check("docs/a.md", text) == []


def test_links_that_do_not() -> None:
    text = ("[gone](b.md)\n[anchor](a.md#nope)\n[self](#missing)\n"
            "[up](../../x.md)\n[old](docs/security/x.md)\n")
    assert check("docs/a.md", text) == [
        "docs/a.md:1: b.md: no such file (docs/b.md)",
        "docs/a.md:2: a.md#nope: no heading #nope in docs/a.md",
        "docs/a.md:3: #missing: no heading #missing in docs/a.md",
        "docs/a.md:4: ../../x.md leaves the repository",
        "docs/a.md:5: docs/security/x.md: no such file (docs/docs/security/x.md)",
    ]
