// Small DOM helpers and formatters. Every text from the API goes into the page through
// textContent (the `h` helper), never HTML.

export const $ = (selector, root = document) => root.querySelector(selector);

/** An element: attrs may hold class, testid, dataset, on<event> handlers, or attributes. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'testid') el.dataset.testid = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'text') el.textContent = value;
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace an element's children (null and undefined are skipped, not written as text). */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export function show(el, visible) { el.hidden = !visible; }

export function message(el, text, kind) {
  el.textContent = text || '';
  el.hidden = !text;
  if (kind) el.dataset.kind = kind;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export const pretty = (value) => JSON.stringify(value, null, 2);
export const number = (n) => (n === null || n === undefined ? '–' : Number(n).toLocaleString('en'));

export function bytes(n) {
  if (n === null || n === undefined) return '';
  if (n < 1024) return `${n} B`;
  return `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KiB`;
}

export function when(iso) {
  if (!iso) return '';
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return iso;
  const s = (Date.now() - t.getTime()) / 1000;
  if (s < 45) return 'just now';
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return t.toLocaleDateString();
}

export function clock(iso) {
  const t = new Date(iso);
  return Number.isNaN(t.getTime()) ? (iso || '') : t.toLocaleTimeString();
}

export function clip(text, n) {
  const s = String(text ?? '');
  return s.length <= n ? s : `${s.slice(0, n - 1)}…`;
}
