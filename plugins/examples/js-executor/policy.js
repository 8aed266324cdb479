// A Canopy executor in JavaScript: a sync policy for `node.pre_dispatch`.
//
// Mode `js-command-policy`: denies a node whose command (or prompt) matches the configured
// regular expression, allows every other, and appends each decision to
// `.policy-audit/decisions.log` in the workdir (the plugin's one grant, `fs-write:.policy-audit`).
// Config: {"deny": "<regex>", "reason": "<text>"}. Keep the audit folder out of git
// (`echo .policy-audit/ >> .git/info/exclude`), or a graph's next run finds the tree dirty.
//
// Build with componentize-js (pinned in package.json) against the contract, from this folder:
//
//     npm ci && npm run build
//
// then `canopy plugin install js-policy.wasm --grant fs-write:.policy-audit`, and name the mode
// in a sync hook: {"mode": "js-command-policy", "deny": "push --force", "reason": "no force pushes"}.
//
// Traps a JavaScript author meets, each the shape of the contract in JS:
// - an `err` result is a thrown *string* (`throw 'field ...'`); a thrown Error becomes a trap
//   and the call fails without your message;
// - `u64` fields (`invocation.deadlineMs`) are BigInt: `Number(invocation.deadlineMs)`;
// - every record field that is not an option must be present (an outcome without `detail`
//   traps); an option may be `undefined`;
// - variants are `{ tag, val }` objects: `{ tag: 'deny', val: reason }`.

import { log } from 'canopy:hooks/host@0.2.0';
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

const AUDIT_DIR = '.policy-audit';
const FIELDS = ['deny', 'reason'];

function parseConfig(text) {
  let config;
  try {
    config = JSON.parse(text);
  } catch (err) {
    throw `the config is not JSON: ${err}`;
  }
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw 'the config must be a JSON object';
  }
  if (typeof config.deny !== 'string' || config.deny === '') {
    throw 'field `deny` must be a regular expression (the commands to deny)';
  }
  try {
    new RegExp(config.deny);
  } catch (err) {
    throw `field \`deny\`: \`${config.deny}\` is not a valid regular expression: ${err.message}`;
  }
  if (config.reason !== undefined && typeof config.reason !== 'string') {
    throw 'field `reason` must be a string';
  }
  const unknown = Object.keys(config).filter((key) => !FIELDS.includes(key));
  if (unknown.length > 0) {
    throw `unknown field \`${unknown[0]}\`; the fields are ${FIELDS.join(', ')}`;
  }
  return config;
}

// Appends one line to `.policy-audit/decisions.log` through the preopen the grant opens.
function audit(workdir, line) {
  const dir = `${workdir}/${AUDIT_DIR}`;
  const preopen = getDirectories().find(([, path]) => path === dir);
  if (preopen === undefined) {
    throw `no preopen for ${dir}: install the plugin with --grant fs-write:${AUDIT_DIR}`;
  }
  const file = preopen[0].openAt({}, 'decisions.log', { create: true }, { write: true });
  const stream = file.appendViaStream();
  stream.blockingWriteAndFlush(new TextEncoder().encode(`${line}\n`));
}

export const plugin = {
  describe() {
    const schema = {
      type: 'object',
      required: ['deny'],
      additionalProperties: false,
      properties: {
        deny: { type: 'string', description: 'regex: a matching command or prompt is denied' },
        reason: { type: 'string', description: "the denial's reason" },
      },
    };
    return {
      name: 'js-policy',
      version: '0.1.0',
      modes: ['js-command-policy'],
      capabilities: [`fs-write:${AUDIT_DIR}`],
      configSchema: JSON.stringify(schema),
      templates: [],
      decides: ['js-command-policy'],
    };
  },

  validate(mode, config) {
    parseConfig(config);
  },

  execute(invocation) {
    const config = parseConfig(invocation.config);
    if (invocation.decisionInput === undefined) {
      // Not asked to decide (`canopy plugin run`, `plugin bench`): nothing to gate.
      return {
        status: { tag: 'completed' },
        summary: 'js-command-policy decides only as a sync hook; nothing to do',
        detail: '',
        harnessSession: undefined,
        decision: undefined,
      };
    }
    const asked = JSON.parse(invocation.decisionInput);
    const text = asked.command ?? asked.prompt ?? '';
    // What a plugin prints is kept with its hook run (bounded), for debugging.
    console.log(`checking node ${asked.node}: ${JSON.stringify(text)}`);
    let decision;
    if (new RegExp(config.deny).test(text)) {
      const reason = config.reason ?? `\`${text}\` matches the policy \`${config.deny}\``;
      log('info', `denied node ${asked.node}: ${reason}`);
      audit(invocation.workdir, `denied ${asked.node}: ${reason}`);
      decision = { tag: 'deny', val: reason };
    } else {
      audit(invocation.workdir, `allowed ${asked.node}`);
      decision = { tag: 'allow' };
    }
    return {
      status: { tag: 'completed' },
      summary: undefined,
      detail: '',
      harnessSession: undefined,
      decision,
    };
  },
};
