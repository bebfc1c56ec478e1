// The web console of the durable ReAct agent: vanilla JS, no build step, nothing from outside.
// Every text from the API goes into the page through textContent (the `h` helper), never HTML.
'use strict';

(() => {
  const TOKEN_KEY = 'agent-console-token';
  const LIST_EVERY_MS = 4000;
  const STATUS_EVERY_MS = 3000;
  const RECONNECT_MS = 1000;
  // A phone's width (console.css has the same query): one pane at a time, the page scrolls.
  const NARROW = window.matchMedia('(max-width: 820px)');
  const nextMessage = () => `Your next message…${NARROW.matches ? '' : ' (Ctrl+Enter to send)'}`;
  const WAITING = new Set(['waiting_for_confirmation', 'waiting_for_input']);
  const CLOSED = new Set(['completed', 'failed']);
  const STATUS_LABEL = {
    running: 'running',
    waiting_for_confirmation: 'waits for approval',
    waiting_for_input: 'waits for an answer',
    idle: 'idle',
    completed: 'completed',
    failed: 'failed',
  };
  // Events after which what the conversation waits for may have changed.
  const STATUS_EVENTS = new Set(['turn_started', 'approval_requested', 'decision_taken',
    'decision_refused', 'question_asked', 'answered', 'turn_finished', 'tool_finished',
    'child_waiting']);

  // ----- small DOM helpers -----

  const $ = (selector, root = document) => root.querySelector(selector);

  /** An element: attrs may hold class, testid, dataset, on<event> handlers, or attributes. */
  function h(tag, attrs, ...children) {
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

  function append(el, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  /** Replace an element's children (null and undefined are skipped, not written as text). */
  function fill(el, ...children) {
    el.replaceChildren();
    return append(el, children);
  }

  function show(el, visible) { el.hidden = !visible; }

  function message(el, text, kind) {
    el.textContent = text || '';
    el.hidden = !text;
    if (kind) el.dataset.kind = kind;
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const pretty = (value) => JSON.stringify(value, null, 2);
  const number = (n) => (n === null || n === undefined ? '–' : Number(n).toLocaleString('en'));

  function bytes(n) {
    if (n === null || n === undefined) return '';
    if (n < 1024) return `${n} B`;
    return `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KiB`;
  }

  function when(iso) {
    if (!iso) return '';
    const t = new Date(iso);
    if (Number.isNaN(t.getTime())) return iso;
    const s = (Date.now() - t.getTime()) / 1000;
    if (s < 45) return 'just now';
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return t.toLocaleDateString();
  }

  function clock(iso) {
    const t = new Date(iso);
    return Number.isNaN(t.getTime()) ? (iso || '') : t.toLocaleTimeString();
  }

  function statusBadge(status, testid) {
    const s = status || 'unknown';
    return h('span', { class: `badge status-${s}`, testid, dataset: { status: s } },
      STATUS_LABEL[s] || s);
  }

  // ----- the API -----

  let token = localStorage.getItem(TOKEN_KEY) || '';

  class HttpError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  function authHeaders(extra) {
    const headers = { ...(extra || {}) };
    if (token) headers.Authorization = `Bearer ${token}`;
    return headers;
  }

  /** The detail of an error body: FastAPI's string, or its list of validation errors. */
  function detailOf(body, fallback) {
    const detail = body && typeof body === 'object' ? body.detail : body;
    if (typeof detail === 'string' && detail) return detail;
    if (Array.isArray(detail)) {
      return detail.map((e) => {
        const loc = Array.isArray(e.loc) ? e.loc.filter((p) => p !== 'body').join('.') : '';
        return loc ? `${loc}: ${e.msg}` : String(e.msg);
      }).join('; ');
    }
    if (detail) return JSON.stringify(detail);
    return fallback;
  }

  async function api(method, path, body) {
    const init = { method, headers: authHeaders(), cache: 'no-store' };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (err) {
      throw new HttpError(0, `the API cannot be reached (${err.message})`);
    }
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = text; }
    if (res.status === 401) {
      askForToken(detailOf(data, 'a bearer token is required'));
    }
    if (!res.ok) throw new HttpError(res.status, detailOf(data, `HTTP ${res.status}`));
    return data;
  }

  const conversationPath = (cid, tail = '') => `/conversations/${encodeURIComponent(cid)}${tail}`;

  /** What a refused or failed write says, as shown next to the control that sent it. */
  function refusalText(err) {
    if (err.status === 403) return `Not allowed: ${err.message}`;
    if (err.status === 409) return `Refused: ${err.message}`;
    if (err.status === 422) return `Invalid: ${err.message}`;
    return `Failed: ${err.message}`;
  }

  const refusalKind = (err) => (err.status === 409 || err.status === 403 ? 'refused' : 'error');

  // ----- who you are: what your roles let you do (the API decides; the console only says so) -----

  const ROLE_SAYS = {
    viewer: 'reads every conversation, writes nothing',
    user: 'starts conversations; reads, messages, decides and ends their own',
    approver: 'what a user may, and decides the calls of every conversation',
    admin: 'everything',
  };

  /** Whether /config named the roles (an older API's did not: then the API alone decides). */
  const rolesKnown = () => Boolean(config && Array.isArray(config.roles));

  const who = () => `${config.principal} (${config.roles.join('+') || 'no role'})`;

  /** The principal started the conversation, with a role that may act on its own ones. */
  function owns(owner) {
    return owner !== null && owner !== undefined && owner === config.principal
      && config.roles.some((r) => r === 'user' || r === 'approver');
  }

  /** Why the principal may not `start` conversations, `decide` (approve, reject, answer) or
   *  `write` (message, end) the one `owner` started; '' when it may. */
  function whyNot(action, owner) {
    if (!rolesKnown()) return '';
    const readsOnly = !config.roles.some((r) => r !== 'viewer');
    if (action === 'start') {
      if (config.may_start) return '';
      return readsOnly ? `${who()} may read, not start conversations` : `${who()} may not start conversations`;
    }
    if ((action === 'decide' ? config.decides_all : config.writes_all) || owns(owner)) return '';
    if (readsOnly) return `${who()} may read, not write`;
    const whose = owner ? `its owner (${owner})` : 'its owner';
    return action === 'decide'
      ? `${who()} may not decide the calls of this conversation: only ${whose}, an approver or an admin may`
      : `${who()} may not send messages to or end this conversation: only ${whose} or an admin may`;
  }

  /** The header's "signed in as alice · user", and the start form as the roles allow. */
  function showPrincipal() {
    const el = $('[data-testid="principal"]');
    const roles = rolesKnown() ? config.roles : [];
    fill(el, 'signed in as ', h('strong', { testid: 'principal-name' }, config.principal),
      roles.length ? [' · ', h('span', { class: 'roles', testid: 'principal-roles' }, roles.join('+'))] : null);
    el.title = roles.length ? roles.map((r) => `${r}: ${ROLE_SAYS[r] || r}`).join('\n')
      : 'the principal your decisions are recorded as';
    const why = whyNot('start');
    for (const testid of ['new-prompt', 'start']) {
      const control = $(`[data-testid="${testid}"]`);
      control.disabled = Boolean(why);
      control.title = why;
    }
    message($('[data-testid="start-denied"]'), why);
  }

  // ----- the token box -----

  const tokenBox = () => $('[data-testid="token-box"]');

  function askForToken(why) {
    message($('[data-testid="token-why"]'), token ? `The token was refused (${why}).` : '');
    show(tokenBox(), true);
    show($('[data-testid="token-button"]'), true);
  }

  function setupToken() {
    tokenBox().addEventListener('submit', (event) => {
      event.preventDefault();
      token = tokenBox().elements.token.value.trim();
      localStorage.setItem(TOKEN_KEY, token);
      tokenBox().reset();
      show(tokenBox(), false);
      boot();
    });
    $('[data-testid="token-clear"]').addEventListener('click', () => {
      token = '';
      localStorage.removeItem(TOKEN_KEY);
      tokenBox().reset();
    });
    $('[data-testid="token-button"]').addEventListener('click', () => {
      show(tokenBox(), tokenBox().hidden);
    });
  }

  // ----- a JSON Schema validator (the subset tool schemas use) -----

  function typeOf(value) {
    if (value === null) return 'null';
    if (Array.isArray(value)) return 'array';
    if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
    return typeof value;
  }

  function isType(value, type) {
    switch (type) {
      case 'object': return typeOf(value) === 'object';
      case 'array': return Array.isArray(value);
      case 'string': return typeof value === 'string';
      case 'integer': return Number.isInteger(value);
      case 'number': return typeof value === 'number' && Number.isFinite(value);
      case 'boolean': return typeof value === 'boolean';
      case 'null': return value === null;
      default: return true; // an unknown type: the conversation checks it
    }
  }

  function canonical(value) {
    if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
    if (value && typeof value === 'object') {
      return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(',')}}`;
    }
    return JSON.stringify(value);
  }

  const same = (a, b) => canonical(a) === canonical(b);

  function resolveRef(root, ref) {
    if (typeof ref !== 'string' || !ref.startsWith('#')) return undefined;
    let node = root;
    for (const raw of ref.slice(1).split('/').filter(Boolean)) {
      const part = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
      if (node === null || typeof node !== 'object' || !(part in node)) return undefined;
      node = node[part];
    }
    return node;
  }

  const child = (path, key) => (typeof key === 'number' ? `${path}[${key}]` : (path ? `${path}.${key}` : key));

  /** The errors of `value` against `schema`, as "path: what is wrong" lines (none: valid). */
  function validate(schema, value, root = schema, path = '') {
    const at = path || 'arguments';
    if (schema === true || schema === undefined || schema === null) return [];
    if (schema === false) return [`${at}: is not allowed`];
    const errors = [];
    if (schema.$ref !== undefined) {
      const target = resolveRef(root, schema.$ref);
      if (target !== undefined) errors.push(...validate(target, value, root, path));
    }
    if (schema.type !== undefined) {
      const types = Array.isArray(schema.type) ? schema.type : [schema.type];
      if (!types.some((t) => isType(value, t))) {
        errors.push(`${at}: must be ${types.join(' or ')}, not ${typeOf(value)}`);
        return errors; // the other keywords would only repeat it
      }
    }
    if (Array.isArray(schema.enum) && !schema.enum.some((v) => same(v, value))) {
      errors.push(`${at}: must be one of ${schema.enum.map((v) => JSON.stringify(v)).join(', ')}`);
    }
    if ('const' in schema && !same(schema.const, value)) {
      errors.push(`${at}: must be ${JSON.stringify(schema.const)}`);
    }
    if (typeof value === 'string') {
      const length = [...value].length;
      if (schema.minLength !== undefined && length < schema.minLength) {
        errors.push(`${at}: must be at least ${schema.minLength} character${schema.minLength === 1 ? '' : 's'} long`);
      }
      if (schema.maxLength !== undefined && length > schema.maxLength) {
        errors.push(`${at}: must be at most ${schema.maxLength} characters long`);
      }
      if (typeof schema.pattern === 'string') {
        let re = null;
        try { re = new RegExp(schema.pattern, 'u'); } catch { re = null; }
        if (re && !re.test(value)) errors.push(`${at}: must match ${schema.pattern}`);
      }
    }
    if (typeof value === 'number') {
      if (schema.minimum !== undefined && value < schema.minimum) errors.push(`${at}: must be ≥ ${schema.minimum}`);
      if (schema.maximum !== undefined && value > schema.maximum) errors.push(`${at}: must be ≤ ${schema.maximum}`);
      if (typeof schema.exclusiveMinimum === 'number' && value <= schema.exclusiveMinimum) {
        errors.push(`${at}: must be > ${schema.exclusiveMinimum}`);
      }
      if (typeof schema.exclusiveMaximum === 'number' && value >= schema.exclusiveMaximum) {
        errors.push(`${at}: must be < ${schema.exclusiveMaximum}`);
      }
    }
    if (Array.isArray(value)) {
      if (schema.minItems !== undefined && value.length < schema.minItems) errors.push(`${at}: needs at least ${schema.minItems} item(s)`);
      if (schema.maxItems !== undefined && value.length > schema.maxItems) errors.push(`${at}: takes at most ${schema.maxItems} item(s)`);
      if (schema.uniqueItems && new Set(value.map(canonical)).size !== value.length) errors.push(`${at}: items must be unique`);
      const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems
        : (Array.isArray(schema.items) ? schema.items : []);
      value.forEach((item, i) => {
        if (i < prefix.length) errors.push(...validate(prefix[i], item, root, child(path, i)));
        else if (schema.items && !Array.isArray(schema.items)) errors.push(...validate(schema.items, item, root, child(path, i)));
      });
    }
    if (typeOf(value) === 'object') {
      const props = schema.properties || {};
      for (const key of schema.required || []) {
        if (!Object.prototype.hasOwnProperty.call(value, key)) errors.push(`${child(path, key)}: is required`);
      }
      for (const [key, item] of Object.entries(value)) {
        if (Object.prototype.hasOwnProperty.call(props, key)) {
          errors.push(...validate(props[key], item, root, child(path, key)));
        } else if (schema.additionalProperties === false) {
          errors.push(`${child(path, key)}: is not an argument of this tool`);
        } else if (schema.additionalProperties && typeof schema.additionalProperties === 'object') {
          errors.push(...validate(schema.additionalProperties, item, root, child(path, key)));
        }
      }
    }
    if (Array.isArray(schema.allOf)) {
      for (const sub of schema.allOf) errors.push(...validate(sub, value, root, path));
    }
    if (Array.isArray(schema.anyOf)) {
      const each = schema.anyOf.map((sub) => validate(sub, value, root, path));
      if (!each.some((e) => e.length === 0)) {
        errors.push(each.length === 1 ? each[0][0] : `${at}: matches none of the allowed forms (${each.map((e) => e[0]).join(' | ')})`);
      }
    }
    if (Array.isArray(schema.oneOf)) {
      const valid = schema.oneOf.filter((sub) => validate(sub, value, root, path).length === 0).length;
      if (valid !== 1) {
        errors.push(`${at}: must match exactly one of the allowed forms (it matches ${valid})`);
      }
    }
    return errors;
  }

  // ----- the event stream: fetch + ReadableStream (EventSource cannot send headers) -----

  /** Follows a conversation's SSE stream; resumes after the last offset seen when it drops. */
  class EventStream {
    constructor(cid, { onEvent, onState }) {
      this.cid = cid;
      this.onEvent = onEvent;
      this.onState = onState;
      this.last = -1; // the last stream offset handled
      this.stopped = false;
      this.controller = null;
    }

    start() { this.loop(); return this; }

    stop() {
      this.stopped = true;
      if (this.controller) this.controller.abort();
    }

    async loop() {
      let failures = 0;
      while (!this.stopped) {
        let ended = false;
        let why = '';
        try {
          this.controller = new AbortController();
          const headers = authHeaders({ Accept: 'text/event-stream' });
          if (this.last >= 0) headers['Last-Event-ID'] = String(this.last);
          const res = await fetch(conversationPath(this.cid, '/events'),
            { headers, cache: 'no-store', signal: this.controller.signal });
          if (res.status === 401 || res.status === 404) {
            let detail = '';
            try { detail = detailOf(await res.json(), ''); } catch { detail = ''; }
            if (res.status === 401) askForToken(detail || 'a bearer token is required');
            this.onState(res.status === 401 ? 'unauthorized' : 'gone', detail);
            return;
          }
          if (!res.ok || !res.body) {
            let detail = '';
            try { detail = detailOf(await res.json(), ''); } catch { detail = ''; }
            throw new Error(detail || `HTTP ${res.status}`);
          }
          this.onState('live');
          const before = this.last;
          ended = await this.read(res.body);
          if (this.last > before) failures = 0;
        } catch (err) {
          why = err && err.message ? err.message : String(err);
        }
        if (this.stopped) return;
        if (ended) {
          this.onState('ended');
          return;
        }
        failures += 1;
        this.onState('reconnecting', why);
        await sleep(Math.min(RECONNECT_MS * failures, 2000));
      }
    }

    /** Reads SSE until the stream ends: true when it ended with the `end` event. */
    async read(body) {
      const reader = body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      let fields = { data: [], event: '', id: null };
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return false;
          buffer += value;
          for (;;) {
            const at = buffer.search(/[\r\n]/);
            if (at < 0) break;
            if (buffer[at] === '\r' && at === buffer.length - 1) break; // maybe \r\n across chunks
            const line = buffer.slice(0, at);
            buffer = buffer.slice(at + (buffer[at] === '\r' && buffer[at + 1] === '\n' ? 2 : 1));
            if (line === '') {
              const ended = this.dispatch(fields);
              fields = { data: [], event: '', id: null };
              if (ended) return true;
              if (this.stopped) return false;
            } else if (!line.startsWith(':')) {
              const colon = line.indexOf(':');
              const name = colon < 0 ? line : line.slice(0, colon);
              let val = colon < 0 ? '' : line.slice(colon + 1);
              if (val.startsWith(' ')) val = val.slice(1);
              if (name === 'data') fields.data.push(val);
              else if (name === 'event') fields.event = val;
              else if (name === 'id') fields.id = val;
            }
          }
        }
      } finally {
        reader.cancel().catch(() => {});
      }
    }

    dispatch(fields) {
      if (fields.event === 'end') return true;
      if (!fields.data.length) return false;
      const offset = fields.id === null ? NaN : Number.parseInt(fields.id, 10);
      if (Number.isInteger(offset)) {
        if (offset <= this.last) return false; // already handled: never twice
        this.last = offset;
      }
      let data;
      try { data = JSON.parse(fields.data.join('\n')); } catch { return false; }
      try {
        this.onEvent(fields.event || data.kind, data, offset);
      } catch (err) {
        console.error('could not show a stream event', data, err); // the stream goes on
      }
      return false;
    }
  }

  // ----- the conversation list and the inbox -----

  const list = { rows: [], key: '', timer: null, busy: false };

  /** What waits, for someone who may decide it: a viewer's inbox is empty. */
  function waitingRows(rows) {
    return rows.filter((r) => WAITING.has(r.status) && !whyNot('decide', r.owner))
      .sort((a, b) => String(b.started || '').localeCompare(String(a.started || '')));
  }

  async function refreshList() {
    if (list.busy) return;
    list.busy = true;
    const state = $('[data-testid="list-state"]');
    try {
      list.rows = await api('GET', '/conversations?limit=100');
      message(state, '');
      renderList();
    } catch (err) {
      message(state, err.status === 401 ? 'token needed' : `not refreshed: ${err.message}`, 'error');
    } finally {
      list.busy = false;
    }
  }

  function scheduleList() {
    clearInterval(list.timer);
    list.timer = setInterval(refreshList, LIST_EVERY_MS);
  }

  function conversationItem(row, testid) {
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

  function renderList() {
    const waiting = waitingRows(list.rows);
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

  function setupNewConversation() {
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

  // ----- the home view: what waits for you -----

  class HomeView {
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
        const readsOnly = whyNot('start') && rolesKnown() && !config.decides_all;
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

  function clip(text, n) {
    const s = String(text ?? '');
    return s.length <= n ? s : `${s.slice(0, n - 1)}…`;
  }

  // ----- one conversation -----

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

  class ConversationView {
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
        onEvent: (kind, e, offset) => this.onEvent(kind, e, offset),
        onState: (state, why) => this.onStreamState(state, why),
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
      const cfg = config || {};
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
        endButton: h('button', { type: 'button', class: 'danger-outline', testid: 'end', onclick: () => this.end() }, 'End conversation'),
        endNote: h('span', { class: 'inline-note', testid: 'end-outcome', hidden: true }),
        log: h('div', { class: 'log', testid: 'chat', 'aria-live': 'polite' }),
        pending: h('div', { class: 'pending', testid: 'pending' }),
        audit: h('div', { class: 'audit', testid: 'audit', hidden: true }),
        tabChat: h('button', { type: 'button', class: 'tab active', testid: 'tab-chat', onclick: () => this.tab('chat') }, 'Chat'),
        tabAudit: h('button', { type: 'button', class: 'tab', testid: 'tab-audit', onclick: () => this.tab('audit') }, 'Audit trail'),
      };
      this.own = new AgentLog(this.el.log, null);
      this.logs = new Map([[this.cid, this.own]]); // conversation id -> where its events go
      this.composer = this.buildComposer();
      if (rolesKnown() && !config.writes_all) { // whether they may depends on the owner: not known yet
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
            this.el.endButton, this.el.endNote)),
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
      const note = h('div', { class: 'refusal', testid: 'refusal', hidden: true, role: 'alert' });
      const info = h('div', { class: 'inline-note', testid: 'send-outcome', hidden: true });
      const denied = h('div', { class: 'inline-note denied', testid: 'write-denied', hidden: true });
      const form = h('form', { class: 'composer', testid: 'composer' },
        h('div', { class: 'composer-row' }, input, send), denied, note, info);
      input.addEventListener('keydown', (event) => {
        if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) form.requestSubmit();
      });
      form.addEventListener('submit', async (event) => {
        event.preventDefault();
        const text = input.value.trim();
        message(note, '');
        message(info, '');
        if (!text || send.disabled) return;
        send.disabled = true;
        try {
          const outcome = await api('POST', conversationPath(this.cid, '/messages'), { text });
          input.value = '';
          message(info, outcome.turn ? `Sent: it will be answered in turn ${outcome.turn}.` : 'Sent.');
          this.soon();
        } catch (err) {
          message(note, refusalText(err), refusalKind(err));
        } finally {
          send.disabled = false;
        }
      });
      return { form, input, send, note, info, denied };
    }

    // --- the live stream ---

    onStreamState(state, why) {
      if (this.gone) return;
      const labels = { live: 'live', reconnecting: 'reconnecting…', ended: 'ended', gone: 'not found', unauthorized: 'token needed' };
      this.el.stream.textContent = labels[state] || state;
      this.el.stream.dataset.state = state;
      this.el.stream.title = why || '';
      if (state === 'ended') {
        this.note('The conversation has completed.', 'end');
        this.setActivity('');
        this.refreshStatus();
        refreshList();
      }
      if (state === 'gone') message(this.el.error, why || `No such conversation: ${this.cid}`, 'error');
    }

    /** What scrolls the chat: its log, or on a narrow screen the page itself. */
    scroller() {
      return NARROW.matches ? document.scrollingElement || document.documentElement : this.el.log;
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
      const el = this.el.activity;
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
      if (this.gone) return;
      const stick = this.atBottom();
      const log = this.logOf(e);
      const handler = this[`on_${kind}`];
      if (handler) handler.call(this, e, log);
      if (kind !== 'token') {
        for (const b of this.el.log.querySelectorAll('.bubble.streaming')) b.classList.remove('streaming');
      }
      if (stick) this.toBottom();
      if (STATUS_EVENTS.has(kind)) this.soon();
      if (kind === 'approval_requested' || kind === 'question_asked' || kind === 'turn_finished'
          || kind === 'decision_taken' || kind === 'answered') refreshList();
    }

    on_child_started(e, log) {
      if (!e.text || this.logs.has(e.text)) return;
      this.subagent(log.agent ? `${log.agent}/${e.tool}` : e.tool, e.text, log, e.call_id);
    }

    on_turn_started(e, log) {
      if (!log.agent) {
        message(this.composer.info, '');
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
      this.setActivity(this.mayDecide() ? 'waiting for your approval' : 'waiting for approval', log);
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
      this.setActivity(this.mayDecide() ? 'waiting for your answer' : 'waiting for an answer', log);
    }

    on_answered(e, log) {
      this.add(h('div', { class: 'bubble user answer', testid: 'answer' },
        h('div', { class: 'label' }, 'Answer'), e.text || ''), log);
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
      if (this.el.audit && !this.el.audit.hidden) this.refreshAudit();
    }

    // --- the status, and what it waits for ---

    /** The current turn's trace id, linked to the trace viewer when AGENT_TRACE_URL names one. */
    showTrace(traceId) {
      if (!traceId) {
        fill(this.el.trace);
        return;
      }
      const template = config && config.trace_url;
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
      this.el.facts.textContent = facts.join(' · ');
      this.el.facts.title = '';
      this.showTrace(s.trace_id);
      message(this.el.error, s.error ? `Error: ${s.error}` : '', 'error');
      const closed = CLOSED.has(s.status);
      const why = whyNot('write', s.owner); // message and end
      this.el.endButton.disabled = closed || Boolean(why);
      this.el.endButton.title = why;
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
      const stick = this.atBottom();
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
      if (stick) this.toBottom();
    }

    async refreshAudit() {
      if (this.auditBusy) return;
      this.auditBusy = true;
      try {
        const records = await api('GET', conversationPath(this.cid, '/history'));
        if (!this.gone) renderAudit(this.el.audit, records);
      } catch (err) {
        if (!this.gone) fill(this.el.audit, h('div', { class: 'refusal' }, `The audit trail could not be read: ${err.message}`));
      } finally {
        this.auditBusy = false;
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

  // ----- an approval card: approve, reject with a reason, or edit the args -----

  /** What names a pending call from this conversation: its ref (a subagent's `call_0/call_0`). */
  function refOf(p) {
    return p.ref || p.call_id;
  }

  class ApprovalCard {
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
      this.editButton = h('button', { type: 'button', testid: 'edit-args', onclick: () => this.toggleEdit() }, 'Edit args');
      this.reason = h('input', { type: 'text', class: 'reason', testid: 'reject-reason', placeholder: 'Reason for rejecting (the model reads it)' });
      this.rejectButton = h('button', { type: 'button', class: 'danger', testid: 'reject', onclick: () => this.reject() }, 'Reject');
      this.refusal = h('div', { class: 'refusal', testid: 'refusal', hidden: true, role: 'alert' });
      this.outcome = h('div', { class: 'inline-note', testid: 'decision-outcome', hidden: true });
      this.dismiss = h('button', { type: 'button', class: 'link-button dismiss', hidden: true, onclick: () => this.el.remove() }, 'Dismiss');
      this.editor.addEventListener('input', () => { if (!this.argsError.hidden) this.checkEdit(); });
      // then: no controls, and why (four eyes: the owner may not decide this call)
      this.denied = whyNot('decide', view.status.owner)
        || (pending.four_eyes && view.status.owner === config.principal
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
          : h('div', { class: 'card-actions' }, this.approveButton, this.editButton,
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
      for (const b of [this.approveButton, this.editButton, this.rejectButton, this.reason, this.editor]) b.disabled = !enabled;
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

    async approve() {
      const body = this.target();
      if (this.editing) {
        const args = this.checkEdit();
        if (args === null) return; // shown inline; nothing is sent
        body.args = args;
      }
      await this.send('/confirm', body, body.args ? 'Approved with edited arguments.' : 'Approved.');
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

  // ----- a question form: input, choice, multi_choice, confirm -----

  let formSeq = 0;

  class QuestionForm {
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
        } else {
          const type = q.kind === 'multi_choice' ? 'checkbox' : 'radio';
          fields.push(h('div', { class: 'choices' }, (q.options || []).map((option) => h('label', { class: 'choice' },
            h('input', { type, name, value: option, testid: 'answer-option' }), ' ', option))));
        }
        buttons.push(h('button', { type: 'submit', class: 'primary', testid: 'answer-submit' }, 'Answer'));
      }
      this.denied = whyNot('decide', view.status.owner); // then: no controls, and why
      this.el = h('form', { class: 'answer-form', testid: 'answer-form', dataset: { callId: q.call_id, kind: q.kind } },
        h('div', { class: 'card-head' }, h('span', { class: 'card-title' }, 'The agent asks'),
          h('span', { class: 'muted' }, { input: 'free text', choice: 'pick one', multi_choice: 'pick any', confirm: 'yes or no' }[q.kind] || q.kind),
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
      if (this.kind === 'input') {
        const v = this.input.value.trim();
        return v ? [v] : [];
      }
      return [...this.el.querySelectorAll('input:checked')].map((i) => i.value);
    }

    controls(enabled) {
      for (const c of this.el.querySelectorAll('input, button:not(.dismiss)')) c.disabled = !enabled;
    }

    async send(values) {
      message(this.refusal, '');
      this.controls(false);
      message(this.outcome, 'Sending…');
      try {
        // bound to the question shown: a later one (or another subagent's) refuses it
        await api('POST', conversationPath(this.view.cid, '/answer'), { values, call_id: this.callId });
        message(this.outcome, 'Answered. The conversation goes on.', 'ok');
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

  // ----- the audit trail -----

  // A person's input: who started the conversation, sent it a message, or ended it.
  const PERSON_INPUT = { start: 'started by', message: 'message from', answer: 'answered by', end: 'ended by' };

  function renderAudit(root, records) {
    if (!records.length) {
      fill(root, h('p', { class: 'empty' }, 'No step has been recorded yet.'));
      return;
    }
    const rows = records.map((r) => (PERSON_INPUT[r.kind] ? auditInput(r) : auditStep(r)));
    fill(root, h('table', { class: 'audit-table' },
      h('thead', null, h('tr', null, ['Time', 'Where', 'Thought', 'Actions and decisions', 'Tokens', 'Stop'].map((c) => h('th', null, c)))),
      h('tbody', null, rows)));
  }

  function auditStep(r) {
    return h('tr', { testid: 'audit-row', dataset: { turn: r.turn, step: r.step, kind: r.kind } },
      h('td', { class: 'nowrap' }, h('time', { datetime: r.at, title: r.at }, clock(r.at))),
      h('td', { class: 'nowrap' }, r.kind === 'summary' ? `turn ${r.turn} · summary` : `turn ${r.turn} · step ${r.step}`),
      h('td', { class: 'thought' }, r.thought || h('span', { class: 'muted' }, '—')),
      h('td', null, (r.actions || []).length
        ? h('ul', { class: 'audit-actions' }, r.actions.map(auditAction),
          r.actions_left_out ? h('li', { class: 'muted' }, `${r.actions_left_out} more action(s) left out of the record`) : null)
        : h('span', { class: 'muted' }, r.kind === 'summary' ? 'folded older turns' : 'no tool call')),
      h('td', { class: 'nowrap num' }, number((r.tokens || {}).total_tokens)),
      h('td', { class: 'nowrap' }, r.stop_reason || ''));
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

  function auditAction(a) {
    const d = a.decision;
    const input = typeof a.input === 'string' ? a.input : JSON.stringify(a.input);
    return h('li', { class: 'audit-action', testid: 'audit-action', dataset: { callId: a.call_id, tool: a.tool } },
      h('div', null,
        h('code', null, a.tool), ' ', h('span', { class: 'badge tool-status', dataset: { status: a.status } }, a.status),
        a.ms !== null && a.ms !== undefined ? h('span', { class: 'muted' }, ` ${number(a.ms)} ms`) : null,
        h('span', { class: 'muted' }, ` · ${bytes(a.observation_bytes)}${a.full_bytes ? ` of ${bytes(a.full_bytes)}` : ''}`)),
      h('code', { class: 'audit-input', title: input }, clip(input, 240)),
      d ? h('div', { class: `audit-decision ${d.approved ? 'ok' : 'bad'}`, testid: 'audit-decision' },
        d.approved ? '✔ approved by ' : '✘ rejected by ', h('strong', { testid: 'audit-approver' }, d.approver),
        ` at ${clock(d.at)}`, d.reason ? h('span', null, ': ', h('q', null, d.reason)) : null,
        h('span', { class: 'muted hash', title: d.args_hash }, ` · args ${String(d.args_hash || '').replace(/^sha256:/, '').slice(0, 12)}`))
        : null);
  }

  // ----- routing -----

  let config = null;
  let current = null;
  let home = null;

  function route() {
    const main = $('[data-testid="main"]');
    const match = /^#\/c\/(.+)$/.exec(location.hash);
    let cid = null;
    if (match) {
      try { cid = decodeURIComponent(match[1]); } catch { cid = null; }
    }
    if (cid && current && current.cid === cid) return;
    if (current) current.destroy();
    if (home) home.destroy();
    current = null;
    home = null;
    // Which pane a narrow screen shows: the conversation, or the inbox and the list.
    $('.layout').dataset.view = cid ? 'conversation' : 'home';
    if (NARROW.matches) window.scrollTo(0, 0);
    if (cid) current = new ConversationView(main, cid);
    else home = new HomeView(main);
    list.key = '';
    renderList();
  }

  async function boot() {
    try {
      config = await api('GET', '/config');
      showPrincipal();
      show($('[data-testid="token-button"]'), config.auth_required);
    } catch (err) {
      $('[data-testid="principal"]').textContent = err.status === 401 ? 'not signed in' : `API unavailable: ${err.message}`;
      if (err.status === 401) { // the token box is shown; saving it boots again
        fill($('[data-testid="main"]'), h('section', { class: 'home' },
          h('h1', null, 'A token is needed'),
          h('p', { class: 'hint' }, 'This API asks for a bearer token (AGENT_API_TOKENS). Enter yours above: ',
            'it is kept in this browser and sent with every request.')));
        return;
      }
    }
    if (current) {
      current.destroy();
      current = null;
    }
    route();
    refreshList();
    scheduleList();
  }

  window.agentConsole = { validate }; // for the tests and the curious

  document.addEventListener('DOMContentLoaded', () => {
    setupToken();
    setupNewConversation();
    window.addEventListener('hashchange', route);
    boot();
  });
})();
