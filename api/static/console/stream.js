// A conversation's event stream: fetch + ReadableStream (EventSource cannot send headers).
import { authHeaders, conversationPath, detailOf } from './api.js';
import { sleep } from './dom.js';
import { RECONNECT_MS } from './state.js';
import { askForToken } from './token.js';

/** Follows a conversation's SSE stream; resumes after the last offset seen when it drops. */
export class EventStream {
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
