// The audit trail: each recorded step, and each person's input, as a table row.
import { bytes, clip, clock, fill, h, number } from './dom.js';

// A person's input: who started the conversation, sent it a message, or ended it.
const PERSON_INPUT = { start: 'started by', message: 'message from', answer: 'answered by', end: 'ended by', stop: 'turn stopped by' };

/** The trail as a table; `actions.fork(turn, step)` starts a fork from a step,
 * `actions.exportCase()` downloads the conversation as a case, and
 * `actions.downloadResult(callId)` a call's whole result (all through the API). */
export function renderAudit(root, records, actions) {
  if (!records.length) {
    fill(root, h('p', { class: 'empty' }, 'No step has been recorded yet.'));
    return;
  }
  const rows = records.map((r) => (PERSON_INPUT[r.kind] ? auditInput(r) : auditStep(r, actions)));
  fill(root,
    actions ? h('div', { class: 'audit-tools' },
      h('button', { type: 'button', class: 'secondary', testid: 'export-case', onclick: () => actions.exportCase() }, 'Export as a case'),
      h('span', { class: 'hint', testid: 'fork-note' }, 'A case replays in ', h('code', null, 'agent eval'), '; “Fork from here” starts a new conversation from a step.'))
      : null,
    h('table', { class: 'audit-table' },
      h('thead', null, h('tr', null, ['Time', 'Where', 'Thought', 'Actions and decisions', 'Tokens', 'Stop'].map((c) => h('th', null, c)))),
      h('tbody', null, rows)));
}

function auditStep(r, actions) {
  const fork = actions && r.kind === 'step'
    ? h('button', { type: 'button', class: 'link fork-here', testid: 'fork-here', title: `A new conversation from the messages before turn ${r.turn}, step ${r.step}`, onclick: (e) => actions.fork(r.turn, r.step, e.target) }, 'Fork from here')
    : null;
  return h('tr', { testid: 'audit-row', dataset: { turn: r.turn, step: r.step, kind: r.kind } },
    h('td', { class: 'nowrap' }, h('time', { datetime: r.at, title: r.at }, clock(r.at))),
    h('td', { class: 'nowrap' }, r.kind === 'summary' ? `turn ${r.turn} · summary` : `turn ${r.turn} · step ${r.step}${r.kind === 'sampling' ? ' · sampling' : ''}`, fork ? h('div', null, fork) : null),
    h('td', { class: 'thought' }, r.thought || h('span', { class: 'muted' }, '—')),
    h('td', null, (r.actions || []).length
      ? h('ul', { class: 'audit-actions' }, r.actions.map((a) => auditAction(a, actions)),
        r.actions_left_out ? h('li', { class: 'muted' }, `${r.actions_left_out} more action(s) left out of the record`) : null)
      : r.kind === 'sampling' ? sampling(r)
        : h('span', { class: 'muted' }, r.kind === 'summary' ? 'folded older turns' : 'no tool call')),
    h('td', { class: 'nowrap num' }, number((r.tokens || {}).total_tokens)),
    h('td', { class: 'nowrap' }, r.stop_reason || ''));
}

/** An MCP server's sampling request, answered by the conversation's model during a call. */
function sampling(r) {
  return h('span', { class: 'audit-sampling', testid: 'audit-sampling' },
    'MCP server ', h('strong', null, r.by || 'unknown'), ' asked the model',
    r.entry ? ` (${r.entry})` : '', ': ', h('q', { class: 'audit-text' }, r.text || ''));
}

/** A person's input, across the step columns: who, and what they wrote. */
function auditInput(r) {
  return h('tr', { class: `audit-input-row input-${r.kind}`, testid: 'audit-row', dataset: { turn: r.turn, kind: r.kind } },
    h('td', { class: 'nowrap' }, h('time', { datetime: r.at, title: r.at }, clock(r.at))),
    h('td', { class: 'nowrap' }, `turn ${r.turn} · ${r.kind}`),
    h('td', { colspan: 4, testid: 'audit-input' },
      h('span', { class: 'audit-who' }, PERSON_INPUT[r.kind], ' ', h('strong', { testid: 'audit-by' }, r.by || 'unknown')),
      r.text ? h('q', { class: 'audit-text', testid: 'audit-text' }, r.text) : null));
}

/** A tool call of a step; one whose result the model was shown cut offers the whole result
 * (kept by reference) as a download. */
function auditAction(a, actions) {
  const d = a.decision;
  const input = typeof a.input === 'string' ? a.input : JSON.stringify(a.input);
  return h('li', { class: 'audit-action', testid: 'audit-action', dataset: { callId: a.call_id, tool: a.tool } },
    h('div', null,
      h('code', null, a.tool), ' ', h('span', { class: 'badge tool-status', dataset: { status: a.status } }, a.status),
      a.ms !== null && a.ms !== undefined ? h('span', { class: 'muted' }, ` ${number(a.ms)} ms`) : null,
      h('span', { class: 'muted' }, ` · ${bytes(a.observation_bytes)}${a.full_bytes ? ` of ${bytes(a.full_bytes)}` : ''}`),
      a.full_bytes && actions ? h('button', { type: 'button', class: 'link', testid: 'download-result', title: 'The whole result, as the tool returned it', onclick: (e) => actions.downloadResult(a.call_id, e.target) }, 'Download the whole result') : null),
    h('code', { class: 'audit-input', title: input }, clip(input, 240)),
    d ? h('div', { class: `audit-decision ${d.approved ? 'ok' : 'bad'}`, testid: 'audit-decision' },
      d.approved ? '✔ approved by ' : '✘ rejected by ', h('strong', { testid: 'audit-approver' }, d.approver),
      ` at ${clock(d.at)}`, d.reason ? h('span', null, ': ', h('q', null, d.reason)) : null,
      h('span', { class: 'muted hash', title: d.args_hash }, ` · args ${String(d.args_hash || '').replace(/^sha256:/, '').slice(0, 12)}`))
      : null);
}
