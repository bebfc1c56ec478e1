// The home view: what waits for you, with what each waiting conversation asks.
import { api, conversationPath } from './api.js';
import { clip, fill, h, when } from './dom.js';
import { list, waitingRows } from './inbox.js';
import { rolesKnown, who, whyNot } from './roles.js';
import { state, statusBadge } from './state.js';

export class HomeView {
  constructor(root) {
    this.root = root;
    this.details = new Map(); // cid -> status, for the inbox's cards
    this.list = h('div', { class: 'home-cards', testid: 'home-inbox' });
    fill(root, h('section', { class: 'home', testid: 'home-view' },
      h('h1', null, 'Needs you'),
      h('p', { class: 'hint' },
        'Conversations waiting for an approval or an answer. Each one is a Temporal workflow: ',
        'it waits, durably, for as long as it takes.'),
      this.list));
    this.render(waitingRows(list.rows));
  }

  destroy() { this.gone = true; }

  render(waiting) {
    if (this.gone) return;
    fill(this.list, ...waiting.map((row) => this.card(row)));
    if (!waiting.length) {
      const readsOnly = whyNot('start') && rolesKnown() && !state.config.decides_all;
      this.list.append(h('p', { class: 'empty' }, readsOnly
        ? `Nothing waits for you: ${who()} may read every conversation, not decide. Open one from the list.`
        : 'Nothing waits for you. Start a conversation on the left, or open one from the list.'));
    }
    for (const row of waiting.slice(0, 10)) this.fetchDetail(row.workflow_id);
  }

  async fetchDetail(cid) {
    try {
      const status = await api('GET', conversationPath(cid));
      if (this.gone) return;
      this.details.set(cid, status);
      const card = this.list.querySelector(`[data-id="${CSS.escape(cid)}"] .home-detail`);
      if (card) fill(card, ...this.describe(status));
    } catch { /* the list says enough */ }
  }

  describe(status) {
    if (!status) return ['…'];
    const out = [];
    for (const p of status.pending_confirmations || []) {
      out.push(h('div', null, 'approve ', h('code', null, p.tool), ' ',
        h('span', { class: `risk risk-${p.risk}` }, p.risk), ' ',
        h('span', { class: 'muted' }, clip(JSON.stringify(p.args), 90))));
    }
    if (status.pending_question) {
      out.push(h('div', null, 'answer: ', h('q', null, status.pending_question.message)));
    }
    return out.length ? out : ['…'];
  }

  card(row) {
    return h('a', {
      class: 'home-card', href: `#/c/${encodeURIComponent(row.workflow_id)}`,
      dataset: { id: row.workflow_id },
    },
    h('div', { class: 'home-card-head' },
      h('strong', null, row.workflow_id), statusBadge(row.status),
      h('time', { datetime: row.started || '' }, when(row.started))),
    row.prompt ? h('div', { class: 'conv-prompt', title: row.prompt }, row.prompt) : null,
    h('div', { class: 'home-detail' }, ...this.describe(this.details.get(row.workflow_id))));
  }
}
