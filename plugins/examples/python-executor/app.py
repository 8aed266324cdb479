"""A Canopy executor in Python: a sync policy for `node.pre_dispatch`.

Mode `command-policy`: denies a node whose command (or prompt) matches the configured regular
expression, and allows every other. Config: {"deny": "<regex>", "reason": "<text>"}.

Build (componentize-py 0.25.1, from PyPI) against the contract, from the repository's root:

    componentize-py -d wit/since_v0.2.0 -w executor componentize \
        -p plugins/examples/python-executor app -o python-policy.wasm

then `canopy plugin install python-policy.wasm` (it asks for no capability), and name the mode in
a sync hook: {"mode": "command-policy", "deny": "push --force", "reason": "no force pushes"}.
"""

import json
import re

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import canopy_hooks_types as types
from wit_world.imports import host


def _config(text: str) -> dict:
    try:
        config = json.loads(text)
    except ValueError as err:
        raise Err(f"the config is not JSON: {err}")
    deny = config.get("deny")
    if not isinstance(deny, str) or not deny:
        raise Err("field `deny` must be a regular expression (the commands to deny)")
    try:
        re.compile(deny)
    except re.error as err:
        raise Err(f"field `deny`: `{deny}` is not a valid regular expression: {err}")
    unknown = set(config) - {"deny", "reason"}
    if unknown:
        raise Err(f"unknown field `{sorted(unknown)[0]}`; the fields are deny, reason")
    return config


class Plugin(exports.Plugin):
    def describe(self) -> types.Manifest:
        schema = {
            "type": "object",
            "required": ["deny"],
            "additionalProperties": False,
            "properties": {
                "deny": {"type": "string", "description": "regex: a matching command or prompt is denied"},
                "reason": {"type": "string", "description": "the denial's reason"},
            },
        }
        return types.Manifest(
            name="python-policy",
            version="0.1.0",
            modes=["command-policy"],
            capabilities=[],
            config_schema=json.dumps(schema),
            templates=[],
            decides=["command-policy"],
        )

    def validate(self, mode: str, config: str) -> None:
        _config(config)

    def execute(self, invocation: types.Invocation) -> types.Outcome:
        config = _config(invocation.config)
        if invocation.decision_input is None:
            # Not asked to decide (`canopy plugin run`, `plugin bench`): nothing to gate.
            return types.Outcome(
                status=types.Status_Completed(),
                summary="command-policy decides only as a sync hook; nothing to do",
                detail="",
                harness_session=None,
                decision=None,
            )
        asked = json.loads(invocation.decision_input)
        text = asked.get("command") or asked.get("prompt") or ""
        # What a plugin prints is kept with its hook run (bounded), for debugging.
        print(f"checking node {asked.get('node')}: {text!r}")
        if re.search(config["deny"], text):
            reason = config.get("reason") or f"`{text}` matches the policy `{config['deny']}`"
            host.log(types.Level.INFO, f"denied node {asked.get('node')}: {reason}")
            decision = types.Decision_Deny(reason)
        else:
            decision = types.Decision_Allow()
        return types.Outcome(
            status=types.Status_Completed(),
            summary=None,
            detail="",
            harness_session=None,
            decision=decision,
        )
