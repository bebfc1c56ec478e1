// What the console knows (the API's /config, the token, the view shown) and its constants.
import { h } from './dom.js';

export const TOKEN_KEY = 'agent-console-token';
export const LIST_EVERY_MS = 4000;
export const STATUS_EVERY_MS = 3000;
export const RECONNECT_MS = 1000;
// A phone's width (console.css has the same query): one pane at a time, the page scrolls.
export const NARROW = window.matchMedia('(max-width: 820px)');
export const nextMessage = () => `Your next message…${NARROW.matches ? '' : ' (Ctrl+Enter to send)'}`;
export const WAITING = new Set(['waiting_for_confirmation', 'waiting_for_input']);
export const CLOSED = new Set(['completed', 'failed']);
export const STATUS_LABEL = {
  running: 'running',
  waiting_for_confirmation: 'waits for approval',
  waiting_for_input: 'waits for an answer',
  idle: 'idle',
  completed: 'completed',
  failed: 'failed',
};
// Events after which what the conversation waits for may have changed.
export const STATUS_EVENTS = new Set(['turn_started', 'approval_requested', 'decision_taken',
  'decision_refused', 'question_asked', 'answered', 'turn_finished', 'tool_finished',
  'child_waiting']);

/** Shared by the modules: `config` is the API's /config (null until read), `current` the
 *  conversation shown, `home` the home view shown (one of them at a time). */
export const state = {
  token: localStorage.getItem(TOKEN_KEY) || '',
  config: null,
  current: null,
  home: null,
};

export function statusBadge(status, testid) {
  const s = status || 'unknown';
  return h('span', { class: `badge status-${s}`, testid, dataset: { status: s } },
    STATUS_LABEL[s] || s);
}
