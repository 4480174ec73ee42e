"""mqadmin's grouped listing: every command in exactly one group, ``mqadmin`` with no
argument, ``mqadmin help <command>``, ``--help``."""

from __future__ import annotations

from collections import Counter

from click.testing import CliRunner

from client.admin_cli import cli
from client.admin_help import ALIASES, COMMAND_GROUPS, FOOTER, HEADER, OTHER, grouped


def registered() -> list[str]:
    return [name for name, cmd in cli.commands.items() if not cmd.hidden]


def test_every_registered_command_is_in_exactly_one_group() -> None:
    listed = Counter(name for _, members in COMMAND_GROUPS for name in members)
    twice = sorted(name for name, n in listed.items() if n > 1)
    assert not twice, f"commands in more than one group: {twice}"
    missing = sorted(n for n in registered() if n not in listed and n not in ALIASES)
    assert not missing, f"commands in no group of client/admin_help.py: {missing}"
    for alias, name in ALIASES.items():
        assert alias in cli.commands and name in listed, alias
        assert cli.commands[alias] is cli.commands[name]
        assert alias not in listed


def test_a_command_in_no_group_is_shown_under_other() -> None:
    assert grouped(["zzz", "updateTopic", "deleteAclConfig"]) == [
        ("Topic", ["updateTopic"]), (OTHER, ["zzz"])]


def test_no_argument_lists_every_command_by_group() -> None:
    result = CliRunner().invoke(cli, [])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == HEADER and lines[-1] == FOOTER
    headings = [line[:-1] for line in lines[1:] if line and not line.startswith(" ")
                and line.endswith(":")]
    assert headings == [title for title, members in COMMAND_GROUPS
                        if any(n in cli.commands for n in members)]
    shown = [line.split()[0] for line in lines if line.startswith("   ")]
    assert sorted(shown) == sorted(n for n in registered() if n not in ALIASES)
    # RocketMQ's "   %-35s %s": the name, padded, then what it does
    row = next(line for line in lines if line.startswith("   queryCq "))
    assert row[3:39] == f"{'queryCq':<35} " and row[39:].startswith("Query cq command")
    # under its heading
    at = lines.index("Queue:")
    assert lines[at + 1].split()[0] == "queryCq"


def test_help_shows_one_commands_options() -> None:
    result = CliRunner().invoke(cli, ["help", "printMsgByQueue"])
    assert result.exit_code == 0, result.output
    assert "-a, --brokerName" in result.stdout and "-f, --calculate" in result.stdout
    listing = CliRunner().invoke(cli, ["help"])
    assert listing.exit_code == 0 and listing.stdout.splitlines()[0] == HEADER
    unknown = CliRunner().invoke(cli, ["help", "nope"])
    assert unknown.exit_code != 0 and "The sub command nope not exist." in unknown.output


def test_dash_dash_help_shows_the_groups() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Topic commands:" in result.stdout and "Ha commands:" in result.stdout
    assert result.stdout.index("Topic commands:") < result.stdout.index("ACL commands:")
