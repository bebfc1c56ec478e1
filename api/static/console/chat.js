// A conversation's chat: its events as bubbles, tool cards and notes, a subagent's in a box
// under the card of the call that started it.
import { append, bytes, fill, h, message, number, pretty, show } from './dom.js';
import { refreshList } from './inbox.js';
import { NARROW, STATUS_EVENTS } from './state.js';

/** Where one conversation's events go: the view's own chat, or a subagent's box inside it.
 *  Each keeps its own bubbles and cards, as turn, step and call ids repeat across agents. */
class AgentLog {
  constructor(root, agent) {
    this.root = root;
    this.agent = agent; // the profile path from the viewed conversation; null for its own
    this.bubbles = new Map(); // "turn:step" -> the assistant bubble
    this.cards = new Map(); // call_id -> the tool card
    this.lastAssistant = null;
  }
}

/** The chat of a ConversationView (`view`): its log, and what its stream's events show. */
export class Chat {
  constructor(view) {
    this.view = view;
    this.root = view.el.log;
    this.own = new AgentLog(this.root, null);
    this.logs = new Map([[view.cid, this.own]]); // conversation id -> where its events go
  }

  /** What scrolls the chat: its log, or on a narrow screen the page itself. */
  scroller() {
    return NARROW.matches ? document.scrollingElement || document.documentElement : this.root;
  }

  atBottom() {
    const s = this.scroller();
    return s.scrollHeight - s.scrollTop - s.clientHeight < 60;
  }

  toBottom() {
    const s = this.scroller();
    s.scrollTop = s.scrollHeight;
  }

  add(node, log = this.own) {
    const stick = this.atBottom();
    log.root.append(node);
    if (stick) this.toBottom();
    return node;
  }

  note(text, kind, log = this.own) {
    return this.add(h('div', { class: `note note-${kind || 'info'}`, testid: 'chat-note' }, text), log);
  }

  /** What the conversation is doing, or a subagent, named. A subagent's idling clears only its
   *  own word: its events can come after the conversation's later ones. */
  setActivity(text, log = this.own) {
    const el = this.view.el.activity;
    if (!log.agent) el.textContent = text;
    else if (text) el.textContent = `${log.agent}: ${text}`;
    else if (el.textContent.startsWith(`${log.agent}: `)) el.textContent = '';
  }

  /** Where an event goes: the API marks a subagent's event with its conversation id. */
  logOf(e) {
    if (!e.conversation_id) return this.own;
    return this.logs.get(e.conversation_id) || this.subagent(e.agent, e.conversation_id, this.own);
  }

  /** A subagent's box: under the card of the call that started it, as `watch` shows it. */
  subagent(agent, cid, parent, callId) {
    const box = h('div', { class: 'subagent', testid: 'subagent', dataset: { agent, conversationId: cid } },
      h('div', { class: 'subagent-head' }, '⇢ ', h('strong', { testid: 'agent-name' }, agent), ' agent ',
        h('code', { class: 'muted' }, cid)));
    const card = parent.cards.get(callId);
    if (card) card.el.root.append(box);
    else this.add(box, parent);
    const log = new AgentLog(box, agent);
    this.logs.set(cid, log);
    return log;
  }

  onEvent(kind, e) {
    if (this.view.gone) return;
    const stick = this.atBottom();
    const log = this.logOf(e);
    const handler = this[`on_${kind}`];
    if (handler) handler.call(this, e, log);
    if (kind !== 'token') {
      for (const b of this.root.querySelectorAll('.bubble.streaming')) b.classList.remove('streaming');
    }
    if (stick) this.toBottom();
    if (STATUS_EVENTS.has(kind)) this.view.soon();
    if (kind === 'approval_requested' || kind === 'question_asked' || kind === 'turn_finished'
        || kind === 'decision_taken' || kind === 'answered') refreshList();
  }

  on_child_started(e, log) {
    if (!e.text || this.logs.has(e.text)) return;
    this.subagent(log.agent ? `${log.agent}/${e.tool}` : e.tool, e.text, log, e.call_id);
  }

  on_turn_started(e, log) {
    if (!log.agent) {
      message(this.view.composer.info, '');
      this.add(h('div', { class: 'turn-divider' }, h('span', null, `turn ${e.turn}`)));
    }
    this.add(h('div', { class: 'bubble user', testid: 'user-message', dataset: { turn: e.turn } },
      log.agent ? h('div', { class: 'label' }, 'Task') : null, e.text || ''), log);
    this.setActivity('working…', log);
  }

  on_llm_started(e, log) { this.setActivity(`model thinking · step ${e.step}`, log); }

  bubble(e, log) {
    const key = `${e.turn}:${e.step}`;
    let bubble = log.bubbles.get(key);
    if (!bubble) {
      const text = h('span', { class: 'text' });
      const el = h('div', { class: 'bubble assistant', testid: 'assistant-text', dataset: { key, turn: e.turn, step: e.step } }, text);
      bubble = { el, text };
      log.bubbles.set(key, bubble);
      this.add(el, log);
    }
    log.lastAssistant = bubble;
    return bubble;
  }

  on_token(e, log) {
    if (!e.text) return;
    const bubble = this.bubble(e, log);
    bubble.el.classList.add('streaming');
    bubble.text.textContent += e.text;
  }

  on_reset(e, log) {
    const bubble = log.bubbles.get(`${e.turn}:${e.step}`);
    if (bubble) {
      bubble.text.textContent = '';
      bubble.el.classList.add('was-reset');
    }
    this.setActivity(e.attempt == null && e.text ? `${e.text} · step ${e.step}`
      : `model call retried · step ${e.step}`, log);
  }

  card(e, log) {
    let card = log.cards.get(e.call_id);
    if (!card) {
      const el = {
        root: h('div', { class: 'tool-card', testid: 'tool-card', dataset: { callId: e.call_id || '', tool: e.tool || '' } }),
        status: h('span', { class: 'badge tool-status', testid: 'tool-status' }),
        ms: h('span', { class: 'tool-ms', testid: 'tool-ms' }),
        bytes: h('span', { class: 'tool-bytes', testid: 'tool-bytes' }),
        risk: h('span', { class: 'risk', hidden: true }),
        args: h('pre', { class: 'tool-args', testid: 'tool-args' }),
        progress: h('div', { class: 'tool-progress', testid: 'tool-progress', hidden: true }),
        decision: h('div', { class: 'tool-decision', testid: 'tool-decision', hidden: true }),
        observation: h('details', { class: 'tool-observation', testid: 'tool-observation', hidden: true }),
      };
      append(el.root, [
        h('div', { class: 'tool-head' },
          h('span', { class: 'tool-icon', 'aria-hidden': 'true' }, '⚙'),
          h('code', { class: 'tool-name', testid: 'tool-name' }, e.tool || '?'),
          el.risk, el.status, h('span', { class: 'tool-meta' }, el.ms, el.bytes)),
        el.args, el.progress, el.decision, el.observation]);
      card = { el };
      log.cards.set(e.call_id, card);
      this.add(el.root, log);
    }
    if (e.args) {
      const flat = JSON.stringify(e.args);
      card.el.args.textContent = flat.length <= 90 ? flat : pretty(e.args);
    }
    if (e.risk) {
      card.el.risk.textContent = e.risk;
      card.el.risk.className = `risk risk-${e.risk}`;
      show(card.el.risk, true);
    }
    return card;
  }

  cardStatus(card, status, label) {
    card.el.status.textContent = label || status;
    card.el.status.dataset.status = status;
    card.el.root.dataset.status = status;
  }

  on_tool_started(e, log) {
    const card = this.card(e, log);
    this.cardStatus(card, 'running', 'running…');
    this.setActivity(`running ${e.tool}`, log);
  }

  /** The running tool's latest word on how far it got (`ctx.progress`). */
  on_tool_progress(e, log) {
    const card = this.card(e, log);
    card.el.progress.textContent = e.text || '';
    show(card.el.progress, true);
    this.setActivity(`${e.tool}: ${e.text || ''}`, log);
  }

  on_tool_finished(e, log) {
    const card = this.card(e, log);
    this.cardStatus(card, e.status || 'ok');
    card.el.ms.textContent = e.ms !== undefined ? `${number(e.ms)} ms` : '';
    card.el.bytes.textContent = e.observation_bytes !== undefined ? bytes(e.observation_bytes) : '';
    card.el.bytes.title = e.observation_bytes !== undefined ? `${e.observation_bytes} bytes of observation` : '';
    card.el.bytes.dataset.bytes = e.observation_bytes ?? '';
    if (e.text) {
      fill(card.el.observation, h('summary', null, 'observation'), h('pre', null, e.text));
      show(card.el.observation, true);
    }
    this.setActivity('', log);
  }

  on_approval_requested(e, log) {
    const card = this.card(e, log);
    this.cardStatus(card, 'awaiting', 'waits for approval');
    this.setActivity(this.view.mayDecide() ? 'waiting for your approval' : 'waiting for approval', log);
  }

  on_decision_taken(e, log) {
    const card = this.card(e, log);
    const approved = e.status === 'approved';
    this.cardStatus(card, approved ? 'approved' : 'rejected');
    fill(card.el.decision,
      h('span', { class: approved ? 'ok' : 'bad' }, approved ? '✔ approved' : '✘ rejected'),
      ' by ', h('strong', { testid: 'approver' }, e.approver || 'unknown'),
      e.text ? h('span', null, ': ', h('q', null, e.text)) : null);
    show(card.el.decision, true);
    if (!approved) this.setActivity('', log);
  }

  on_decision_refused(e, log) {
    this.note(`A decision was refused: ${e.text || ''}`, 'warn', log);
  }

  on_question_asked(e, log) {
    const options = (e.options || []).length
      ? h('ul', { class: 'options' }, e.options.map((o) => h('li', null, o))) : null;
    this.add(h('div', { class: 'bubble assistant question', testid: 'question', dataset: { callId: e.call_id || '', kind: e.question_kind || '' } },
      h('div', { class: 'label' }, 'The agent asks'), h('div', null, e.text || ''), options), log);
    this.setActivity(this.view.mayDecide() ? 'waiting for your answer' : 'waiting for an answer', log);
  }

  on_answered(e, log) {
    this.add(h('div', { class: 'bubble user answer', testid: 'answer' },
      h('div', { class: 'label' }, 'Answer'), e.text || ''), log);
    this.setActivity('working…', log);
  }

  // A message steered into the turn: shown as it was sent, then when the model got it.
  on_steer_queued(e, log) {
    this.add(h('div', { class: 'bubble user steered', testid: 'steered-message', dataset: { turn: e.turn } },
      h('div', { class: 'label' }, 'Sent now'), e.text || ''), log);
  }

  on_steered(e, log) { this.note(`The model got the message sent now (step ${e.step}).`, 'info', log); }

  // A turn waiting for its owner's share (AGENT_OWNER_LIMITS), then going on.
  on_turn_held(e, log) {
    this.note(`Waiting for the owner's share: ${e.text || ''}`, 'warn', log);
    this.setActivity("waiting for the owner's share", log);
  }

  on_turn_resumed(e, log) {
    this.note("The owner's share allows it: going on.", 'info', log);
    this.setActivity('working…', log);
  }

  on_summary_started(e, log) { this.note('Folding earlier turns into a summary…', 'info', log); }

  on_summary_finished(e, log) { this.note('Summary updated.', 'info', log); }

  on_turn_finished(e, log) {
    const text = (e.text || '').trim();
    const last = log.lastAssistant;
    if (text) {
      if (last && last.el.dataset.turn === String(e.turn) && last.text.textContent.trim() === text) {
        last.el.dataset.testid = 'final-answer';
        last.el.classList.add('final');
      } else {
        const el = h('div', { class: 'bubble assistant final', testid: 'final-answer', dataset: { turn: e.turn } },
          h('span', { class: 'text' }, e.text));
        this.add(el, log);
      }
    }
    this.add(h('div', { class: 'turn-end', testid: 'turn-end', dataset: { stopReason: e.stop_reason || '' } },
      `turn ${e.turn} finished · ${e.stop_reason || 'done'}`), log);
    if (e.error) this.add(h('div', { class: 'turn-error', testid: 'turn-error' }, e.error), log);
    log.lastAssistant = null;
    this.setActivity('', log);
    if (this.view.el.audit && !this.view.el.audit.hidden) this.view.refreshAudit();
  }
}
