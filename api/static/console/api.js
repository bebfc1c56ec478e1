// The API: JSON over fetch, with the bearer token when there is one.
import { state } from './state.js';
import { askForToken } from './token.js';

export class HttpError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

export function authHeaders(extra) {
  const headers = { ...(extra || {}) };
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  return headers;
}

/** The detail of an error body: FastAPI's string, or its list of validation errors. */
export function detailOf(body, fallback) {
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

export async function api(method, path, body) {
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

export const conversationPath = (cid, tail = '') => `/conversations/${encodeURIComponent(cid)}${tail}`;

/** What a refused or failed write says, as shown next to the control that sent it. */
export function refusalText(err) {
  if (err.status === 403) return `Not allowed: ${err.message}`;
  if (err.status === 409) return `Refused: ${err.message}`;
  if (err.status === 422) return `Invalid: ${err.message}`;
  return `Failed: ${err.message}`;
}

export const refusalKind = (err) => (err.status === 409 || err.status === 403 ? 'refused' : 'error');
