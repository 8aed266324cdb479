"""Drives Canopy's MCP server with the official Python SDK (`mcp` from PyPI), as an agent would.

Usage: drive.py stdio CANOPY DATA_DIR WORKDIR HOOK_FILE
       drive.py http URL TOKEN WORKDIR HOOK_FILE
       drive.py modern CANOPY DATA_DIR       (after `stdio`: see modern())

Lists the tools; adds two specs and a queue; creates a graph, then gives it an on_completed
`command` hook (graph_edit update with the hooks map) that appends to HOOK_FILE; subscribes to
the graph's resource; checks that a run on an unknown queue is a tool error naming `queue_id`;
runs the graph over the queue; polls graph_get until the graph settles; waits for the
resource-updated notification; reads the feed and the hook runs; sends a message to the live
session `lead` (which the caller made). Prints one JSON line with what it saw; exits non-zero (with the
reason on stderr) on the first thing that is not as an agent would expect.
"""

import asyncio
import json
import sys
import time
import warnings

import anyio
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

EXPECTED_TOOLS = {
    "graph_list", "graph_get", "graph_edit", "graph_control",
    "spec_add", "spec_list", "spec_get", "spec_update",
    "queue_create", "queue_add", "queue_reorder", "queue_group", "queue_show",
    "hooks_runs", "hooks_test", "session_list", "session_send", "feed_read",
}

SPEC = """<spec>
<objective>{name}</objective>
<functional_requirements>- it works</functional_requirements>
<non_functional_requirements>- fast</non_functional_requirements>
<constraints>- none</constraints>
<guidelines>- none</guidelines>
<in_scope>- all</in_scope>
<out_of_scope>- nothing</out_of_scope>
</spec>"""


def fail(message):
    raise AssertionError(message)


async def tool(session, name, arguments):
    """Calls a tool that must succeed; returns its answer as JSON."""
    result = await session.call_tool(name, arguments)
    text = result.content[0].text if result.content else ""
    if result.is_error:
        fail(f"{name} {arguments} failed: {text}")
    return json.loads(text)


async def tool_error(session, name, arguments):
    """Calls a tool that must fail; returns its error text."""
    result = await session.call_tool(name, arguments)
    text = result.content[0].text if result.content else ""
    if not result.is_error:
        fail(f"{name} {arguments} should have failed, answered {text}")
    return text


async def scenario(read, write, workdir, hook_file):
    updates = []

    async def on_message(message):
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(message.params.uri)

    seen = {}
    async with ClientSession(read, write, message_handler=on_message) as session:
        init = await session.initialize()
        seen["server"] = init.server_info.name
        listed = await session.list_tools()
        names = {t.name for t in listed.tools}
        if names != EXPECTED_TOOLS:
            fail(f"tools: missing {EXPECTED_TOOLS - names}, unexpected {names - EXPECTED_TOOLS}")
        control = next(t for t in listed.tools if t.name == "graph_control")
        for field in ("graph", "action", "queue_id", "mode", "node"):
            if field not in control.input_schema.get("properties", {}):
                fail(f"graph_control's schema lacks {field}: {control.input_schema}")
        seen["tools"] = sorted(names)

        a = await tool(session, "spec_add", {"name": "Login form", "body": SPEC.format(name="Login form")})
        b = await tool(session, "spec_add", {"name": "Search", "body": SPEC.format(name="Search")})
        queue = await tool(session, "queue_create", {"name": "sprint-1", "specs": [a["id"], b["id"]]})
        if len(queue.get("members", [])) != 2:
            fail(f"queue_create: {queue}")

        await tool(session, "graph_edit", {
            "action": "create", "name": "web", "workdir": workdir, "specs": [],
            "nodes": [{"name": "build", "command": "true"}],
        })
        edited = await tool(session, "graph_edit", {
            "action": "update", "graph": "web",
            "hooks": {"on_completed": [{"command": f"echo completed {{{{graph_name}}}} >> {hook_file}"}]},
        })
        if "on_completed" not in json.dumps(edited.get("hooks", edited)):
            fail(f"graph_edit update did not set the hook: {edited}")

        uri = "canopy://graphs/web"
        resource = await session.read_resource(uri)
        if json.loads(resource.contents[0].text)["name"] != "web":
            fail(f"resource {uri}: {resource}")
        await session.subscribe_resource(uri)

        seen["error"] = await tool_error(session, "graph_control",
                                         {"graph": "web", "action": "run", "queue_id": "no-such-queue"})
        await tool(session, "graph_control", {"graph": "web", "action": "run", "queue_id": "sprint-1"})

        deadline = time.monotonic() + 60
        while True:
            view = await tool(session, "graph_get", {"graph": "web"})
            if view["status"] != "running":
                break
            if time.monotonic() > deadline:
                fail(f"graph web still running after 60 s: {view}")
            await anyio.sleep(0.05)
        seen["status"] = view["status"]
        seen["view"] = view

        deadline = time.monotonic() + 20
        while uri not in updates:
            if time.monotonic() > deadline:
                fail(f"no notifications/resources/updated for {uri}; got {updates}")
            await anyio.sleep(0.05)
        seen["updates"] = sorted(set(updates))
        feed = await tool(session, "feed_read", {"event": "graph.run.started"})
        seen["run_started_actors"] = [e["actor"] for e in feed["events"]]
        # The on_completed hook runs once the run has settled: wait for it to end.
        deadline = time.monotonic() + 30
        while True:
            runs = await tool(session, "hooks_runs", {"graph": "web", "event": "on_completed"})
            statuses = [r["status"] for r in runs["runs"]]
            if statuses and not {"queued", "running"} & set(statuses):
                break
            if time.monotonic() > deadline:
                fail(f"the on_completed hook run did not end within 30 s: {statuses}")
            await anyio.sleep(0.05)
        seen["hook_runs"] = statuses

        sessions = await tool(session, "session_list", {})
        seen["sessions"] = [s["name"] for s in sessions["sessions"]]
        sent = await tool(session, "session_send", {"session": "lead", "text": "review the login form"})
        seen["message_id"] = sent["message_id"]
    return seen


async def modern(canopy, data_dir):
    """The SDK's high-level Client as it connects by default (`server/discover`, protocol
    2026-07-28 where the server speaks it): a tool error, and a `subscriptions/listen` stream
    that reports a change to the graph `web` (which the stdio scenario made)."""
    from mcp.client import Client
    from mcp.shared.subscriptions import ResourceUpdated

    seen = {}
    server = StdioServerParameters(command=canopy, args=["--data-dir", data_dir, "mcp"])
    async with Client(server) as client:
        seen["protocol"] = client.protocol_version
        result = await client.call_tool("graph_edit", {"action": "update", "graph": "web", "nodes": "sideways"})
        if not result.is_error:
            fail(f"nodes that are not a list should be refused: {result}")
        seen["error"] = result.content[0].text
        uri = "canopy://graphs/web"
        async with client.listen(resource_subscriptions=[uri]) as sub:
            seen["honored"] = list(sub.honored.resource_subscriptions or [])
            events = aiter(sub)
            # No replay on listen: change the graph until a change is reported (the first
            # edit may land before the server has the feed open).
            deadline = time.monotonic() + 20
            version = 0
            while True:
                version += 1
                edit = await client.call_tool("graph_edit", {"action": "update", "graph": "web",
                                                              "allow_dirty_start": version % 2 == 1})
                if edit.is_error:
                    fail(f"graph_edit update: {edit.content[0].text}")
                try:
                    with anyio.fail_after(0.5):
                        event = await anext(events)
                    break
                except TimeoutError:
                    if time.monotonic() > deadline:
                        fail(f"no change reported on {uri} in 20 s")
            if not isinstance(event, ResourceUpdated) or event.uri != uri:
                fail(f"listen: expected ResourceUpdated({uri}), got {event!r}")
            seen["event"] = event.uri
    return seen


async def main():
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "modern":
        seen = await modern(*rest)
    elif mode == "stdio":
        canopy, data_dir, workdir, hook_file = rest
        server = StdioServerParameters(command=canopy, args=["--data-dir", data_dir, "mcp"])
        async with stdio_client(server) as (read, write):
            seen = await scenario(read, write, workdir, hook_file)
    elif mode == "http":
        url, token, workdir, hook_file = rest
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with client, streamable_http_client(url, http_client=client) as (read, write):
            seen = await scenario(read, write, workdir, hook_file)
    else:
        fail(f"unknown mode {mode}")
    print(json.dumps(seen))


if __name__ == "__main__":
    # resources/subscribe is how a 2025-era session subscribes, which is what this checks.
    warnings.filterwarnings("ignore", message="resources/subscribe")
    try:
        anyio.run(main)
    except* AssertionError as group:
        for err in group.exceptions:
            print(f"drive.py: {err}", file=sys.stderr)
        sys.exit(1)
