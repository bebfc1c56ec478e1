// An approval card: approve (once, or for the rest of the conversation: a grant), reject with a
// reason, or edit the args (checked against the tool's schema in the page before they are sent).
import { api, conversationPath, refusalKind, refusalText } from './api.js';
import { fill, h, message, pretty, show } from './dom.js';
import { refreshList } from './inbox.js';
import { whyNot } from './roles.js';
import { typeOf, validate } from './schema.js';
import { state } from './state.js';

/** What names a pending call from this conversation: its ref (a subagent's `call_0/call_0`). */
export function refOf(p) {
  return p.ref || p.call_id;
}

/** Whether an approval of this call may be remembered: never under four eyes (a grant is no
 *  second person), nor a destructive call unless the conversation says it may be (a policy
 *  rule's `grantable`); the conversation decides, and refuses what may not be. */
function grantable(p) {
  return !p.four_eyes && (p.grantable === true || (p.grantable !== false && p.risk !== 'destructive'));
}

export class ApprovalCard {
  constructor(view, pending, schema) {
    this.view = view;
    this.callId = refOf(pending); // a subagent's call by its path: call ids can repeat across them
    this.pending = pending;
    this.schema = schema;
    this.editing = false;
    this.args = h('pre', { class: 'tool-args', testid: 'approval-args' }, pretty(pending.args));
    this.editor = h('textarea', { class: 'args-editor', testid: 'args-editor', rows: 6, spellcheck: 'false', 'aria-label': 'arguments as JSON' });
    this.argsError = h('ul', { class: 'args-error', testid: 'args-error', hidden: true, role: 'alert' });
    this.schemaNote = h('div', { class: 'hint' });
    this.editBox = h('div', { class: 'edit-box', hidden: true }, h('label', null, 'Arguments (JSON)'), this.editor, this.argsError, this.schemaNote);
    this.approveButton = h('button', { type: 'button', class: 'primary', testid: 'approve', onclick: () => this.approve() }, 'Approve');
    // a grant: later calls of this tool in this conversation run without asking (until revoked)
    this.allowButton = grantable(pending) ? h('button', {
      type: 'button', class: 'allow', testid: 'approve-remember', onclick: () => this.approve('conversation'),
      title: `Approve, and let later ${pending.tool} calls of this conversation run without asking (a grant, which can be revoked)`,
    }, 'Allow for this conversation') : null;
    this.editButton = h('button', { type: 'button', testid: 'edit-args', onclick: () => this.toggleEdit() }, 'Edit args');
    this.reason = h('input', { type: 'text', class: 'reason', testid: 'reject-reason', placeholder: 'Reason for rejecting (the model reads it)' });
    this.rejectButton = h('button', { type: 'button', class: 'danger', testid: 'reject', onclick: () => this.reject() }, 'Reject');
    this.refusal = h('div', { class: 'refusal', testid: 'refusal', hidden: true, role: 'alert' });
    this.outcome = h('div', { class: 'inline-note', testid: 'decision-outcome', hidden: true });
    this.dismiss = h('button', { type: 'button', class: 'link-button dismiss', hidden: true, onclick: () => this.el.remove() }, 'Dismiss');
    this.editor.addEventListener('input', () => { if (!this.argsError.hidden) this.checkEdit(); });
    // then: no controls, and why (four eyes: the owner may not decide this call)
    this.denied = whyNot('decide', view.status.owner)
      || (pending.four_eyes && view.status.owner === state.config.principal
        ? `four eyes: a ${pending.risk} call is decided by someone other than you, who started this conversation (an approver)`
        : '');
    this.el = h('div', { class: 'approval-card', testid: 'approval-card', dataset: { callId: this.callId, tool: pending.tool } },
      h('div', { class: 'card-head' },
        h('span', { class: 'card-title' }, this.denied ? 'Waits for approval: ' : 'Approve ',
          h('code', { testid: 'approval-tool' }, pending.tool), this.denied ? null : '?'),
        h('span', { class: `risk risk-${pending.risk}` }, pending.risk),
        h('span', { class: 'muted call-id' }, this.callId), this.dismiss),
      this.args, this.editBox,
      this.denied ? h('div', { class: 'inline-note denied', testid: 'decide-denied' }, this.denied)
        : h('div', { class: 'card-actions' }, this.approveButton, this.allowButton, this.editButton,
          h('span', { class: 'spacer' }), this.reason, this.rejectButton),
      this.refusal, this.outcome);
    this.update(pending, schema);
  }

  update(pending, schema) {
    this.pending = pending;
    this.schema = schema;
    this.args.textContent = pretty(pending.args);
    this.schemaNote.textContent = schema ? 'Checked against the tool\'s schema before it is sent.'
      : 'The tool\'s schema is not available here: the conversation checks the arguments.';
  }

  buttons(enabled) {
    for (const b of [this.approveButton, this.allowButton, this.editButton, this.rejectButton, this.reason, this.editor]) {
      if (b) b.disabled = !enabled;
    }
  }

  toggleEdit() {
    this.editing = !this.editing;
    if (this.editing && !this.editor.value) this.editor.value = pretty(this.pending.args);
    show(this.editBox, this.editing);
    show(this.args, !this.editing);
    this.editButton.textContent = this.editing ? 'Cancel edit' : 'Edit args';
    this.approveButton.textContent = this.editing ? 'Approve with these args' : 'Approve';
    if (!this.editing) {
      this.editor.value = '';
      fill(this.argsError);
      show(this.argsError, false);
    } else {
      this.editor.focus();
    }
  }

  /** The edited args, or null with the errors shown. */
  checkEdit() {
    let value;
    let errors = [];
    try {
      value = JSON.parse(this.editor.value);
    } catch (err) {
      errors = [`not valid JSON: ${err.message}`];
    }
    if (!errors.length && typeOf(value) !== 'object') errors = [`the arguments must be a JSON object, not ${typeOf(value)}`];
    if (!errors.length && this.schema) errors = validate(this.schema, value);
    fill(this.argsError, ...errors.map((e) => h('li', null, e)));
    show(this.argsError, errors.length > 0);
    this.editor.setAttribute('aria-invalid', errors.length ? 'true' : 'false');
    return errors.length ? null : value;
  }

  /** The call, bound to the arguments this card shows: other arguments are refused. */
  target() {
    const body = { call_ids: [this.callId] };
    if (this.pending.args_hash) body.seen = { [this.callId]: this.pending.args_hash };
    return body;
  }

  /** Approve; with `remember` ('conversation'), remembered as a grant the conversation keeps. */
  async approve(remember) {
    const body = this.target();
    if (this.editing) {
      const args = this.checkEdit();
      if (args === null) return; // shown inline; nothing is sent
      body.args = args;
    }
    if (remember) body.remember = remember;
    const done = body.args ? 'Approved with edited arguments.' : 'Approved.';
    await this.send('/confirm', body, remember
      ? `${done} Later ${this.pending.tool} calls of this conversation run without asking.` : done);
  }

  async reject() {
    await this.send('/reject', { ...this.target(), reason: this.reason.value.trim() }, 'Rejected.');
  }

  async send(path, body, done) {
    message(this.refusal, '');
    this.buttons(false);
    message(this.outcome, 'Sending…');
    try {
      await api('POST', conversationPath(this.view.cid, path), body);
      message(this.outcome, `${done} The conversation goes on.`, 'ok');
      this.decided = true;
      this.view.soon();
      refreshList();
    } catch (err) {
      message(this.outcome, '');
      message(this.refusal, refusalText(err), refusalKind(err));
      this.buttons(true);
      this.view.soon();
    }
  }

  /** No longer pending: gone, unless it shows a refusal, which stays until dismissed. */
  retire() {
    if (this.refusal.hidden) {
      this.el.remove();
      return;
    }
    this.buttons(false);
    this.el.classList.add('retired');
    show(this.dismiss, true);
  }
}
