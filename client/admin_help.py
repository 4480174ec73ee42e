"""mqadmin's command listing, by group.

``mqadmin`` with no argument (or ``mqadmin help``) prints every command as
RocketMQ's ``MQAdminStartup.printHelp`` does (``   %-35s %s``: name, then what
it does), under headings: the packages RocketMQ's tools keep its commands in
(``tools/command/topic``, ``cluster``, ``broker``, ``message``, ``queue``,
``consumer``, ``offset``, ``namesrv``, ``stats``, ``acl``, ``ha``; the
``connection`` commands go under Consumer and Producer). RocketMQ prints one
flat list. ``mqadmin help <command>`` prints a command's options, as
RocketMQ's; ``mqadmin --help`` shows the same groups.

``COMMAND_GROUPS`` names every command, those other modules register too
(tests/client/test_admin_help.py fails on a registered command in no group or
in two). A name listed but not registered is left out of the listing.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

COMMAND_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Topic", ("updateTopic", "deleteTopic", "topicList", "topicRoute", "topicStatus",
               "topicClusterList", "updateTopicPerm", "updateOrderConf", "allocateMQ")),
    ("Cluster", ("clusterList", "clusterRT")),
    ("Broker", ("brokerStatus", "getBrokerConfig", "updateBrokerConfig", "sendMsgStatus",
                "cleanExpiredCQ", "cleanUnusedTopic")),
    ("Message", ("sendMessage", "consumeMessage", "printMsg", "printMsgByQueue", "queryMsgById",
                 "queryMsgByKey", "queryMsgByUniqueKey", "queryMsgByOffset", "queryMsgTraceById",
                 "checkMsgSendRT")),
    ("Queue", ("queryCq",)),
    ("Consumer", ("consumerProgress", "consumerConnection", "consumerStatus", "updateSubGroup",
                  "deleteSubGroup")),
    ("Producer", ("producerConnection",)),
    ("Offset", ("resetOffsetByTime", "searchOffsetByTime", "cloneGroupOffset",
                "skipAccumulatedMessage")),
    ("Namesrv", ("wipeWritePerm", "addWritePerm", "updateKvConfig", "deleteKvConfig",
                 "getNamesrvConfig", "updateNamesrvConfig")),
    ("Stats", ("statsAll",)),
    ("ACL", ("updateAclConfig", "deleteAccessConfig", "updateGlobalWhiteAddr",
             "clusterAclConfigVersion")),
    ("Ha", ("haStatus", "getSyncStateSet", "getBrokerEpoch")),
    ("Controller", ("getControllerMetaData", "electMaster")),
)
# second names of a listed command (registered too; listed once, under the first)
ALIASES: dict[str, str] = {"deleteAclConfig": "deleteAccessConfig"}
HEADER = "The most commonly used mqadmin commands are:"
FOOTER = "See 'mqadmin help <command>' for more information on a specific command."
OTHER = "Other"
SHORT_HELP_LIMIT = 100


def grouped(names: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``names`` (registered commands) under their group headings, in
    COMMAND_GROUPS' order; aliases left out; a name in no group under "Other"."""
    present = set(names)
    out = [(title, [n for n in members if n in present]) for title, members in COMMAND_GROUPS]
    listed = {n for _, members in COMMAND_GROUPS for n in members}
    other = sorted(n for n in present if n not in listed and n not in ALIASES)
    if other:
        out.append((OTHER, other))
    return [(title, members) for title, members in out if members]


def _visible(group: click.Group, ctx: click.Context) -> dict[str, click.Command]:
    found = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is not None and not cmd.hidden:
            found[name] = cmd
    return found


def listing(group: click.Group, ctx: click.Context) -> list[str]:
    """RocketMQ's printHelp, by group."""
    commands = _visible(group, ctx)
    lines = [HEADER]
    for title, names in grouped(list(commands)):
        lines += ["", f"{title}:"]
        lines += [f"   {n:<35} {commands[n].get_short_help_str(SHORT_HELP_LIMIT)}".rstrip()
                  for n in names]
    return [*lines, "", FOOTER]


class GroupedCommands(click.Group):
    """A click group whose ``--help`` lists its commands by COMMAND_GROUPS."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = _visible(self, ctx)
        for title, names in grouped(list(commands)):
            with formatter.section(f"{title} commands"):
                formatter.write_dl([(n, commands[n].get_short_help_str(SHORT_HELP_LIMIT))
                                    for n in names])


def register_help(group: click.Group) -> None:
    """``mqadmin help [command]`` (hidden: it is no command of its own in the listing)."""

    @group.command("help", hidden=True)
    @click.argument("command", required=False)
    @click.pass_context
    def help_command(ctx: click.Context, command: str | None) -> None:
        """The listing, or one command's options."""
        parent = ctx.parent or ctx
        if command is None:
            for line in listing(group, parent):
                click.echo(line)
            return
        cmd = group.get_command(parent, command)
        if cmd is None:
            raise click.ClickException(f"The sub command {command} not exist.")
        with click.Context(cmd, info_name=command,
                           parent=parent) as sub:
            click.echo(cmd.get_help(sub))
