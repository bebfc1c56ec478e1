// The sidebar: the new conversation form, the "Needs you" inbox and the conversation list.
import { api, refusalText } from './api.js';
import { $, fill, h, message, when } from './dom.js';
import { whyNot } from './roles.js';
import { LIST_EVERY_MS, state, statusBadge, WAITING } from './state.js';

export const list = { rows: [], key: '', timer: null, busy: false };

/** What waits, for someone who may decide it: a viewer's inbox is empty. */
export function waitingRows(rows) {
  return rows.filter((r) => WAITING.has(r.status) && !whyNot('decide', r.owner))
    .sort((a, b) => String(b.started || '').localeCompare(String(a.started || '')));
}

export async function refreshList() {
  if (list.busy) return;
  list.busy = true;
  const shown = $('[data-testid="list-state"]');
  try {
    list.rows = await api('GET', '/conversations?limit=100');
    message(shown, '');
    renderList();
  } catch (err) {
    message(shown, err.status === 401 ? 'token needed' : `not refreshed: ${err.message}`, 'error');
  } finally {
    list.busy = false;
  }
}

export function scheduleList() {
  clearInterval(list.timer);
  list.timer = setInterval(refreshList, LIST_EVERY_MS);
}

function conversationItem(row, testid) {
  const { config, current } = state;
  const selected = current && current.cid === row.workflow_id;
  return h('li', null,
    h('a', {
      href: `#/c/${encodeURIComponent(row.workflow_id)}`,
      class: `conv-item${selected ? ' selected' : ''}`,
      testid,
      dataset: { id: row.workflow_id, status: row.status || '' },
      'aria-current': selected ? 'page' : null,
    },
    h('span', { class: 'conv-id', title: row.workflow_id }, row.workflow_id),
    row.prompt ? h('span', { class: 'conv-prompt', title: row.prompt }, row.prompt) : null,
    h('span', { class: 'conv-meta' },
      statusBadge(row.status),
      row.owner && config && config.auth_required && config.sees_all
        ? h('span', { class: 'conv-owner', title: `started by ${row.owner}` }, row.owner) : null,
      h('time', { datetime: row.started || '', title: row.started || '' }, when(row.started)))));
}

export function renderList() {
  const waiting = waitingRows(list.rows);
  const { current, home } = state;
  const key = JSON.stringify([list.rows, current && current.cid, Math.floor(Date.now() / 30000)]);
  if (key === list.key) return;
  list.key = key;
  const inbox = $('[data-testid="inbox"]');
  fill(inbox, ...waiting.map((r) => conversationItem(r, 'inbox-item')));
  if (!waiting.length) inbox.append(h('li', { class: 'empty' }, 'Nothing waits for you.'));
  $('[data-testid="inbox-count"]').textContent = String(waiting.length);
  $('[data-testid="inbox-count"]').dataset.count = String(waiting.length);
  const all = $('[data-testid="conversation-list"]');
  fill(all, ...list.rows.map((r) => conversationItem(r, 'conversation-item')));
  if (!list.rows.length) all.append(h('li', { class: 'empty' }, 'No conversations yet.'));
  document.title = waiting.length ? `(${waiting.length}) Agent console` : 'Agent console';
  if (home) home.render(waiting);
}

export function setupNewConversation() {
  const form = $('[data-testid="new-conversation"]');
  const prompt = $('[data-testid="new-prompt"]');
  const error = $('[data-testid="start-error"]');
  const button = $('[data-testid="start"]');
  prompt.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) form.requestSubmit();
  });
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const text = prompt.value.trim();
    if (whyNot('start')) return; // the form says why
    if (!text) {
      message(error, 'Write the first message.', 'error');
      return;
    }
    button.disabled = true;
    message(error, '');
    try {
      const status = await api('POST', '/conversations', { prompt: text });
      prompt.value = '';
      location.hash = `#/c/${encodeURIComponent(status.workflow_id)}`;
      refreshList();
    } catch (err) {
      message(error, err.status === 403 ? refusalText(err) : err.message, 'error');
    } finally {
      button.disabled = false;
    }
  });
}
