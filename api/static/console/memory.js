// The Memory view (#/memories): what the agent remembers of you, across conversations. You may
// search it and forget any of it; an admin sees every owner's. The API decides who sees what.
import { api, refusalText } from './api.js';
import { clip, fill, h, message, when } from './dom.js';
import { state } from './state.js';

export class MemoryView {
  constructor(root) {
    this.root = root;
    this.query = h('input', {
      type: 'search', testid: 'memory-query', placeholder: 'Search memories…', autocomplete: 'off',
    });
    this.list = h('div', { class: 'home-cards', testid: 'memory-list' });
    this.error = h('p', { class: 'form-error', testid: 'memory-error', hidden: true });
    const form = h('form', {
      class: 'memory-search',
      onsubmit: (e) => { e.preventDefault(); this.load(); },
    }, this.query, h('button', { type: 'submit' }, 'Search'));
    const admin = state.config && Array.isArray(state.config.roles) && state.config.roles.includes('admin');
    fill(root, h('section', { class: 'home', testid: 'memory-view' },
      h('h1', null, 'Memory'),
      h('p', { class: 'hint' },
        admin ? 'What the agent remembers of everyone (you are an admin). '
          : 'What the agent remembers of you, across your conversations. ',
        'A memory is stored when you approve a remember call; each turn, the ones most relevant to ',
        'your message reach the model as data. Forget one and no conversation sees it again.'),
      form, this.error, this.list));
    this.load();
  }

  destroy() { this.gone = true; }

  render() { /* the conversation list changed: nothing of it shows here */ }

  async load() {
    const q = this.query.value.trim();
    let rows;
    try {
      rows = await api('GET', `/memories${q ? `?query=${encodeURIComponent(q)}` : ''}`);
    } catch (err) {
      if (!this.gone) message(this.error, refusalText(err), 'error');
      return;
    }
    if (this.gone) return;
    message(this.error, '');
    fill(this.list, ...rows.map((m) => this.card(m)));
    if (!rows.length) {
      this.list.append(h('p', { class: 'empty', testid: 'memory-empty' }, q
        ? 'No memory matches.' : 'Nothing is remembered yet. Ask the agent to "remember that …".'));
    }
  }

  card(m) {
    const forget = h('button', {
      type: 'button', class: 'danger-outline', testid: 'memory-forget',
      onclick: () => this.forget(m, forget),
    }, 'Forget');
    return h('div', { class: 'home-card memory-card', testid: 'memory', dataset: { id: m.id } },
      h('div', { class: 'home-card-head' },
        h('strong', null, m.id),
        state.config && m.owner !== state.config.principal ? h('span', { class: 'muted', testid: 'memory-owner' }, m.owner) : null,
        h('time', { datetime: m.created_at, title: m.created_at }, when(m.created_at)),
        forget),
      h('div', { class: 'memory-text', testid: 'memory-text' }, m.text),
      m.conversation_id ? h('a', { class: 'hint', href: `#/c/${encodeURIComponent(m.conversation_id)}` },
        'remembered in ', clip(m.conversation_id, 60)) : null);
  }

  async forget(m, button) {
    if (!window.confirm(`Forget this memory?\n\n${clip(m.text, 200)}`)) return;
    button.disabled = true;
    try {
      await api('DELETE', `/memories/${encodeURIComponent(m.id)}`);
    } catch (err) {
      button.disabled = false;
      message(this.error, refusalText(err), 'error');
      return;
    }
    this.load();
  }
}
