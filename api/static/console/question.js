// A question form: input, choice, multi_choice or confirm, answered from the page; an MCP
// server's question (elicitation) is a form of its schema's fields.
import { api, conversationPath, refusalKind, refusalText } from './api.js';
import { h, message, show } from './dom.js';
import { refOf } from './approval.js';
import { refreshList } from './inbox.js';
import { whyNot } from './roles.js';

let formSeq = 0;

export class QuestionForm {
  constructor(view, q) {
    this.view = view;
    this.callId = refOf(q);
    this.kind = q.kind;
    const name = `q${(formSeq += 1)}`;
    this.refusal = h('div', { class: 'refusal', testid: 'refusal', hidden: true, role: 'alert' });
    this.outcome = h('div', { class: 'inline-note', testid: 'answer-outcome', hidden: true });
    this.dismiss = h('button', { type: 'button', class: 'link-button dismiss', hidden: true, onclick: () => this.el.remove() }, 'Dismiss');
    const fields = [];
    const buttons = [];
    if (q.kind === 'confirm') {
      buttons.push(
        h('button', { type: 'button', class: 'primary', testid: 'answer-yes', onclick: () => this.send(['yes']) }, 'Yes'),
        h('button', { type: 'button', testid: 'answer-no', onclick: () => this.send(['no']) }, 'No'));
    } else {
      if (q.kind === 'input') {
        this.input = h('input', { type: 'text', name, testid: 'answer-input', placeholder: 'Your answer', 'aria-label': 'your answer' });
        fields.push(this.input);
      } else if (q.kind === 'elicitation') {
        this.schemaFields = schemaFields(q.answer_schema || {});
        fields.push(h('div', { class: 'elicit-fields' }, this.schemaFields.map((f) => f.label)));
      } else {
        const type = q.kind === 'multi_choice' ? 'checkbox' : 'radio';
        fields.push(h('div', { class: 'choices' }, (q.options || []).map((option) => h('label', { class: 'choice' },
          h('input', { type, name, value: option, testid: 'answer-option' }), ' ', option))));
      }
      buttons.push(h('button', { type: 'submit', class: 'primary', testid: 'answer-submit' }, 'Answer'));
      if (q.kind === 'elicitation') { // the server is told decline
        buttons.push(h('button', { type: 'button', testid: 'answer-decline', onclick: () => this.send(null) }, 'Decline'));
      }
    }
    this.denied = whyNot('decide', view.status.owner); // then: no controls, and why
    this.el = h('form', { class: 'answer-form', testid: 'answer-form', dataset: { callId: q.call_id, kind: q.kind } },
      h('div', { class: 'card-head' }, h('span', { class: 'card-title' }, 'The agent asks'),
        h('span', { class: 'muted' }, { input: 'free text', choice: 'pick one', multi_choice: 'pick any', confirm: 'yes or no' }[q.kind]
          || (q.kind === 'elicitation' ? `asked by ${q.server || 'an MCP server'}'s ${q.tool || 'tool'}` : q.kind)),
        this.dismiss),
      h('p', { class: 'question-text', testid: 'question-text' }, q.message),
      this.denied ? h('div', { class: 'inline-note denied', testid: 'decide-denied' }, this.denied)
        : [fields, h('div', { class: 'card-actions' }, buttons)],
      this.refusal, this.outcome);
    this.el.addEventListener('submit', (event) => {
      event.preventDefault();
      if (this.denied) return;
      const values = this.values();
      if (!values.length) {
        message(this.refusal, q.kind === 'input' ? 'Write an answer first.' : 'Choose an option first.', 'error');
        return;
      }
      this.send(values);
    });
  }

  values() {
    if (this.kind === 'elicitation') {
      const answer = {};
      for (const f of this.schemaFields) {
        const v = f.value();
        if (v !== undefined) answer[f.name] = v;
      }
      return [JSON.stringify(answer)]; // the workflow checks it against the schema
    }
    if (this.kind === 'input') {
      const v = this.input.value.trim();
      return v ? [v] : [];
    }
    return [...this.el.querySelectorAll('input:checked')].map((i) => i.value);
  }

  controls(enabled) {
    for (const c of this.el.querySelectorAll('input, select, button:not(.dismiss)')) c.disabled = !enabled;
  }

  /** Answer with `values`, or (null) decline. */
  async send(values) {
    message(this.refusal, '');
    this.controls(false);
    message(this.outcome, 'Sending…');
    try {
      // bound to the question shown: a later one (or another subagent's) refuses it
      await api('POST', conversationPath(this.view.cid, values ? '/answer' : '/decline'),
        values ? { values, call_id: this.callId } : { call_id: this.callId });
      message(this.outcome, values ? 'Answered. The conversation goes on.' : 'Declined. The conversation goes on.', 'ok');
      this.view.soon();
      refreshList();
    } catch (err) {
      message(this.outcome, '');
      message(this.refusal, refusalText(err), refusalKind(err));
      this.controls(true);
      this.view.soon();
    }
  }

  retire() {
    if (this.refusal.hidden || this.refusal.dataset.kind === 'error') {
      this.el.remove();
      return;
    }
    this.controls(false);
    this.el.classList.add('retired');
    show(this.dismiss, true);
  }
}

// One input per property of an elicitation's schema (MCP asks flat objects of primitives): a
// checkbox, a list to pick one from (`enum`, titled by `enumNames`, or `oneOf` consts with
// titles), checkboxes to pick several (an array of such items), a number, or text (an email, a
// URL or a date as such). Defaults are filled in; an empty optional field is left out.
function schemaFields(schema) {
  const required = new Set(schema.required || []);
  return Object.entries(schema.properties || {}).map(([name, p]) => {
    const title = `${p.title || name}${required.has(name) ? ' *' : ''}`;
    const common = { name, testid: 'elicit-field', 'aria-label': name, dataset: { field: name } };
    const picks = choices(p);
    const several = p.type === 'array' ? choices(p.items || {}) : null;
    let input;
    let value;
    if (p.type === 'boolean') {
      input = h('input', { type: 'checkbox', ...common, checked: Boolean(p.default) });
      value = () => input.checked;
    } else if (several) {
      const chosen = new Set(Array.isArray(p.default) ? p.default.map(String) : []);
      const boxes = several.map(([v, label]) => h('label', { class: 'choice' },
        h('input', { type: 'checkbox', value: v, 'aria-label': `${name} ${label}`, checked: chosen.has(v) }), ' ', label));
      input = h('span', { ...common, role: 'group' }, boxes);
      value = () => {
        const picked = [...input.querySelectorAll('input:checked')].map((i) => i.value);
        return picked.length || required.has(name) ? picked : undefined;
      };
    } else if (picks) {
      input = h('select', common, [required.has(name) ? null : h('option', { value: '' }, ''),
        ...picks.map(([v, label]) => h('option', { value: v, selected: String(p.default) === v }, label))]);
      value = () => (input.value === '' ? undefined : input.value);
    } else if (p.type === 'integer' || p.type === 'number') {
      input = h('input', { type: 'number', step: p.type === 'integer' ? '1' : 'any', ...common, value: p.default ?? '' });
      value = () => (input.value === '' ? undefined : Number(input.value));
    } else {
      const type = { email: 'email', uri: 'url', date: 'date' }[p.format] || 'text';
      input = h('input', { type, ...common, value: p.default ?? '' });
      value = () => (input.value === '' ? undefined : input.value);
    }
    return { name, value, label: h('label', { class: 'elicit-field' }, title, ' ', input,
      p.description ? h('span', { class: 'muted' }, ` ${p.description}`) : null) };
  });
}

/** The values one may pick of a property, each with its label: `enum` (titled by the legacy
 * `enumNames`), or `oneOf`/`anyOf` of `{const, title}`; null if it has none. */
function choices(p) {
  if (Array.isArray(p.enum)) return p.enum.map((v, i) => [String(v), String((p.enumNames || [])[i] ?? v)]);
  const titled = p.oneOf || p.anyOf;
  if (Array.isArray(titled) && titled.length && titled.every((o) => o && 'const' in o)) {
    return titled.map((o) => [String(o.const), String(o.title ?? o.const)]);
  }
  return null;
}
