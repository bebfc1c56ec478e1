// One conversation: its frame (status, facts, trace, end), its chat, what it waits for (the
// approval cards and the question form), the composer and the audit trail.
import { ApprovalCard, refOf } from './approval.js';
import { api, authHeaders, conversationPath, detailOf, HttpError, refusalKind, refusalText } from './api.js';
import { renderAudit } from './audit.js';
import { Chat } from './chat.js';
import { fill, h, message, number, show } from './dom.js';
import { refreshList } from './inbox.js';
import { QuestionForm } from './question.js';
import { rolesKnown, whyNot } from './roles.js';
import { CLOSED, nextMessage, state, STATUS_EVERY_MS, statusBadge } from './state.js';
import { EventStream } from './stream.js';

// The statuses of a turn in flight, which Stop ends.
const IN_A_TURN = new Set(['running', 'waiting_for_confirmation', 'waiting_for_input']);

export class ConversationView {
  constructor(root, cid) {
    this.root = root;
    this.cid = cid;
    this.status = null;
    this.schemas = {};
    this.approvals = new Map(); // call_id -> the approval card
    this.question = null; // the question form
    this.statusTimer = null;
    this.statusSoon = null;
    this.gone = false;
    this.build();
    this.stream = new EventStream(cid, {
      onEvent: (kind, e, offset) => this.chat.onEvent(kind, e, offset),
      onState: (now, why) => this.onStreamState(now, why),
    }).start();
    this.refreshStatus();
    this.statusTimer = setInterval(() => this.refreshStatus(), STATUS_EVERY_MS);
  }

  destroy() {
    this.gone = true;
    this.stream.stop();
    clearInterval(this.statusTimer);
    clearTimeout(this.statusSoon);
  }

  // --- the frame ---

  build() {
    const cfg = state.config || {};
    const link = cfg.temporal_ui
      ? `${cfg.temporal_ui}/namespaces/${encodeURIComponent(cfg.namespace || 'default')}/workflows/${encodeURIComponent(this.cid)}`
      : null;
    this.el = {
      status: h('span', { class: 'badge', testid: 'status' }, '…'),
      stream: h('span', { class: 'stream-state', testid: 'stream-state', dataset: { state: 'connecting' } }, 'connecting…'),
      activity: h('span', { class: 'activity', testid: 'activity' }),
      facts: h('div', { class: 'facts', testid: 'facts' }),
      trace: h('span', { class: 'trace', testid: 'trace' }),
      error: h('div', { class: 'conv-error', testid: 'conversation-error', hidden: true }),
      // Stop ends the turn in flight (one click: the conversation goes on); End ends it all.
      stopButton: h('button', { type: 'button', testid: 'stop', hidden: true, onclick: () => this.stopTurn() }, 'Stop'),
      endButton: h('button', { type: 'button', class: 'danger-outline', testid: 'end', onclick: () => this.end() }, 'End conversation'),
      endNote: h('span', { class: 'inline-note', testid: 'end-outcome', hidden: true }),
      log: h('div', { class: 'log', testid: 'chat', 'aria-live': 'polite' }),
      pending: h('div', { class: 'pending', testid: 'pending' }),
      audit: h('div', { class: 'audit', testid: 'audit', hidden: true }),
      tabChat: h('button', { type: 'button', class: 'tab active', testid: 'tab-chat', onclick: () => this.tab('chat') }, 'Chat'),
      tabAudit: h('button', { type: 'button', class: 'tab', testid: 'tab-audit', onclick: () => this.tab('audit') }, 'Audit trail'),
    };
    this.chat = new Chat(this);
    this.composer = this.buildComposer();
    if (rolesKnown() && !state.config.writes_all) { // whether they may depends on the owner: not known yet
      for (const control of [this.el.endButton, this.composer.input, this.composer.send]) control.disabled = true;
    }
    this.chatPane = h('div', { class: 'chat-pane' }, this.el.log, this.el.pending, this.composer.form);
    fill(this.root, h('section', { class: 'conversation', testid: 'conversation', dataset: { id: this.cid } },
      h('div', { class: 'conv-head' },
        h('a', { href: '#/', class: 'back-link', testid: 'back' }, '← Conversations'), // narrow screens
        h('div', { class: 'conv-title' },
          h('h1', { testid: 'conversation-id', title: this.cid }, this.cid),
          this.el.status, this.el.stream, this.el.activity),
        h('div', { class: 'conv-actions' },
          link && h('a', { href: link, target: '_blank', rel: 'noopener noreferrer', testid: 'temporal-link', class: 'button-link' }, 'Temporal UI ↗'),
          this.el.stopButton, this.el.endButton, this.el.endNote)),
      h('div', { class: 'facts-row' }, this.el.facts, this.el.trace),
      this.el.error,
      h('nav', { class: 'tabs' }, this.el.tabChat, this.el.tabAudit),
      this.chatPane,
      this.el.audit));
  }

  tab(which) {
    const audit = which === 'audit';
    this.el.tabChat.classList.toggle('active', !audit);
    this.el.tabAudit.classList.toggle('active', audit);
    show(this.chatPane, !audit);
    show(this.el.audit, audit);
    if (audit) this.refreshAudit();
  }

  buildComposer() {
    const input = h('textarea', { testid: 'message-input', rows: 1, placeholder: nextMessage() });
    const send = h('button', { type: 'submit', class: 'primary', testid: 'send' }, 'Send');
    // Mid-turn, "Send now" steers the message into the turn: its model gets it at its next step.
    const now = h('button', { type: 'button', testid: 'send-now', hidden: true, onclick: () => post(true) }, 'Send now');
    const note = h('div', { class: 'refusal', testid: 'refusal', hidden: true, role: 'alert' });
    const info = h('div', { class: 'inline-note', testid: 'send-outcome', hidden: true });
    const denied = h('div', { class: 'inline-note denied', testid: 'write-denied', hidden: true });
    const form = h('form', { class: 'composer', testid: 'composer' },
      h('div', { class: 'composer-row' }, input, now, send), denied, note, info);
    input.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) form.requestSubmit();
    });
    const post = async (steer) => {
      const text = input.value.trim();
      message(note, '');
      message(info, '');
      if (!text || send.disabled) return;
      send.disabled = true;
      now.disabled = true;
      try {
        const outcome = await api('POST', conversationPath(this.cid, '/messages'), steer ? { text, steer } : { text });
        input.value = '';
        message(info, outcome.reason ? `Sent: ${outcome.reason}.`
          : (outcome.turn ? `Sent: it will be answered in turn ${outcome.turn}.` : 'Sent.'));
        this.soon();
      } catch (err) {
        message(note, refusalText(err), refusalKind(err));
      } finally {
        send.disabled = false;
        now.disabled = false;
      }
    };
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      post(false);
    });
    return { form, input, send, now, note, info, denied };
  }

  // --- the live stream ---

  onStreamState(now, why) {
    if (this.gone) return;
    const labels = { live: 'live', reconnecting: 'reconnecting…', ended: 'ended', gone: 'not found', unauthorized: 'token needed' };
    this.el.stream.textContent = labels[now] || now;
    this.el.stream.dataset.state = now;
    this.el.stream.title = why || '';
    if (now === 'ended') {
      this.chat.note('The conversation has completed.', 'end');
      this.chat.setActivity('');
      this.refreshStatus();
      refreshList();
    }
    if (now === 'gone') message(this.el.error, why || `No such conversation: ${this.cid}`, 'error');
  }

  // --- the status, and what it waits for ---

  /** The current turn's trace id, linked to the trace viewer when AGENT_TRACE_URL names one. */
  showTrace(traceId) {
    if (!traceId) {
      fill(this.el.trace);
      return;
    }
    const template = state.config && state.config.trace_url;
    const label = `trace ${traceId.slice(0, 8)}…`;
    fill(this.el.trace, template
      ? h('a', { href: template.split('{trace_id}').join(encodeURIComponent(traceId)), target: '_blank', rel: 'noopener noreferrer', testid: 'trace-link', title: traceId }, `${label} ↗`)
      : h('code', { title: traceId, testid: 'trace-id' }, label));
  }

  /** Whether the principal may decide this conversation's calls (its owner unknown yet: no). */
  mayDecide() {
    return !whyNot('decide', this.status && this.status.owner);
  }

  soon() {
    clearTimeout(this.statusSoon);
    this.statusSoon = setTimeout(() => this.refreshStatus(), 100);
  }

  async refreshStatus() {
    if (this.statusBusy) { this.statusAgain = true; return; }
    this.statusBusy = true;
    try {
      const status = await api('GET', conversationPath(this.cid));
      if (this.gone) return;
      this.status = status;
      this.renderStatus(status);
      if ((status.pending_confirmations || []).some((p) => !(refOf(p) in this.schemas))) {
        try {
          Object.assign(this.schemas, await api('GET', conversationPath(this.cid, '/schemas')));
        } catch { /* validated by the conversation anyway */ }
      }
      if (this.gone) return;
      this.renderPending(status);
      if (!this.el.audit.hidden) this.refreshAudit();
      if (CLOSED.has(status.status) && this.el.stream.dataset.state === 'ended') clearInterval(this.statusTimer);
    } catch (err) {
      if (this.gone) return;
      if (err.status === 404) message(this.el.error, err.message, 'error');
      else this.el.facts.title = `status not refreshed: ${err.message}`;
    } finally {
      this.statusBusy = false;
      if (this.statusAgain && !this.gone) {
        this.statusAgain = false;
        this.soon();
      }
    }
  }

  renderStatus(s) {
    const badge = statusBadge(s.status, 'status');
    this.el.status.replaceWith(badge);
    this.el.status = badge;
    const usage = s.usage || {};
    const facts = [
      `turn ${s.turn}`, `${s.steps} step${s.steps === 1 ? '' : 's'}`,
      `${s.llm_calls} model call${s.llm_calls === 1 ? '' : 's'}`,
      `${number(usage.total_tokens)} tokens`,
    ];
    if ((s.tools_used || []).length) facts.push(`tools: ${s.tools_used.join(', ')}`);
    if (s.stop_reason) facts.push(`stop: ${s.stop_reason}`);
    if (s.owner) facts.push(`started by ${s.owner}`);
    if (s.queued_messages) facts.push(`${s.queued_messages} queued message(s)`);
    if (s.runs > 1) facts.push(`${s.runs} runs`);
    if (s.forked_from) facts.push(`forked from ${s.forked_from} at step ${s.at_step}`);
    if (s.version) facts.push(`version ${s.version}`);
    this.el.facts.textContent = facts.join(' · ');
    this.el.facts.title = '';
    this.showTrace(s.trace_id);
    message(this.el.error, s.error ? `Error: ${s.error}` : '', 'error');
    const closed = CLOSED.has(s.status);
    const why = whyNot('write', s.owner); // message and end
    this.el.endButton.disabled = closed || Boolean(why);
    this.el.endButton.title = why;
    this.el.stopButton.hidden = !IN_A_TURN.has(s.status) || Boolean(why);
    this.composer.now.hidden = this.el.stopButton.hidden;
    if (this.el.stopButton.hidden) this.el.stopButton.disabled = false; // ready for the next turn
    if (closed) {
      this.el.endButton.textContent = 'Ended';
      message(this.el.endNote, '');
    }
    this.composer.input.disabled = closed || Boolean(why);
    this.composer.send.disabled = closed || Boolean(why);
    this.composer.input.title = why;
    this.composer.send.title = why;
    this.composer.input.placeholder = closed ? 'The conversation has ended.'
      : (why ? 'You may not send messages to this conversation.' : nextMessage());
    message(this.composer.denied, closed ? '' : why);
  }

  renderPending(s) {
    const stick = this.chat.atBottom();
    const pending = new Map((s.pending_confirmations || []).map((p) => [refOf(p), p]));
    for (const [callId, card] of this.approvals) {
      if (!pending.has(callId)) {
        card.retire();
        this.approvals.delete(callId);
      }
    }
    for (const [callId, p] of pending) {
      const card = this.approvals.get(callId);
      if (card) card.update(p, this.schemas[callId]);
      else {
        const fresh = new ApprovalCard(this, p, this.schemas[callId]);
        this.approvals.set(callId, fresh);
        this.el.pending.append(fresh.el);
      }
    }
    const q = s.pending_question;
    if (this.question && (!q || refOf(q) !== this.question.callId)) {
      this.question.retire();
      this.question = null;
    }
    if (q && !this.question) {
      this.question = new QuestionForm(this, q);
      this.el.pending.append(this.question.el);
    }
    this.el.pending.classList.toggle('has-items', this.el.pending.children.length > 0);
    if (stick) this.chat.toBottom();
  }

  async refreshAudit() {
    if (this.auditBusy) return;
    this.auditBusy = true;
    try {
      const records = await api('GET', conversationPath(this.cid, '/history'));
      if (!this.gone) renderAudit(this.el.audit, records, { fork: (turn, step, button) => this.fork(turn, step, button), exportCase: () => this.exportCase(), downloadResult: (callId, button) => this.downloadResult(callId, button) });
    } catch (err) {
      if (!this.gone) fill(this.el.audit, h('div', { class: 'refusal' }, `The audit trail could not be read: ${err.message}`));
    } finally {
      this.auditBusy = false;
    }
  }

  /** Fork from a step of the audit trail: a new conversation, yours, opened once it starts. */
  async fork(turn, step, button) {
    button.disabled = true;
    button.textContent = 'Forking…';
    try {
      const status = await api('POST', conversationPath(this.cid, '/fork'), { turn, at_step: step });
      refreshList();
      location.hash = `#/c/${encodeURIComponent(status.workflow_id)}`;
    } catch (err) {
      button.disabled = false;
      button.textContent = refusalText(err);
    }
  }

  /** The conversation as a case file, downloaded. */
  async exportCase() {
    try {
      const data = await api('GET', conversationPath(this.cid, '/export'));
      const link = h('a', { href: URL.createObjectURL(new Blob([`${JSON.stringify(data, null, 2)}\n`], { type: 'application/json' })), download: `${this.cid}.case.json` });
      document.body.append(link);
      link.click();
      link.remove();
    } catch (err) {
      fill(this.el.audit, h('div', { class: 'refusal' }, `The case could not be exported: ${err.message}`));
    }
  }

  /** A tool call's whole result, read by reference from the history, as a file. */
  async downloadResult(callId, button) {
    button.disabled = true;
    try {
      const res = await fetch(conversationPath(this.cid, `/results/${encodeURIComponent(callId)}`), { headers: authHeaders(), cache: 'no-store' });
      if (!res.ok) throw new HttpError(res.status, detailOf(await res.json().catch(() => null), `HTTP ${res.status}`));
      const link = h('a', { href: URL.createObjectURL(await res.blob()), download: `${callId}.txt` });
      document.body.append(link);
      link.click();
      link.remove();
    } catch (err) {
      button.textContent = `The result could not be read: ${err.message}`;
    } finally {
      button.disabled = false;
    }
  }

  async stopTurn() {
    const button = this.el.stopButton;
    button.disabled = true;
    try {
      const outcome = await api('POST', conversationPath(this.cid, '/stop'), {});
      message(this.el.endNote, `Stop: ${outcome.reason || 'taken'}.`, 'ok');
      this.soon();
    } catch (err) {
      message(this.el.endNote, refusalText(err), 'refused');
      button.disabled = false;
    }
  }

  async end() {
    const button = this.el.endButton;
    if (button.dataset.armed !== 'yes') { // a second click confirms
      button.dataset.armed = 'yes';
      button.textContent = 'Click again to end';
      this.disarm = setTimeout(() => {
        button.dataset.armed = '';
        if (!button.disabled) button.textContent = 'End conversation';
      }, 4000);
      return;
    }
    clearTimeout(this.disarm);
    button.dataset.armed = '';
    button.textContent = 'Ending…';
    button.disabled = true;
    try {
      await api('POST', conversationPath(this.cid, '/end'), {});
      message(this.el.endNote, 'Ending: work in flight is cancelled.', 'ok');
      this.soon();
      refreshList();
    } catch (err) {
      message(this.el.endNote, refusalText(err), 'refused');
      button.disabled = false;
      button.textContent = 'End conversation';
    }
  }
}
