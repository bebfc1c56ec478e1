// Who you are: what your roles let you do (the API decides; the console only says so).
import { $, fill, h, message } from './dom.js';
import { state } from './state.js';

const ROLE_SAYS = {
  viewer: 'reads every conversation, writes nothing',
  user: 'starts conversations; reads, messages, decides and ends their own',
  approver: 'what a user may, and decides the calls of every conversation',
  admin: 'everything',
};

/** Whether /config named the roles (an older API's did not: then the API alone decides). */
export const rolesKnown = () => Boolean(state.config && Array.isArray(state.config.roles));

export const who = () => `${state.config.principal} (${state.config.roles.join('+') || 'no role'})`;

/** The principal started the conversation, with a role that may act on its own ones. */
function owns(owner) {
  const { config } = state;
  return owner !== null && owner !== undefined && owner === config.principal
    && config.roles.some((r) => r === 'user' || r === 'approver');
}

/** Why the principal may not `start` conversations, `decide` (approve, reject, answer) or
 *  `write` (message, end) the one `owner` started; '' when it may. */
export function whyNot(action, owner) {
  if (!rolesKnown()) return '';
  const { config } = state;
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
export function showPrincipal() {
  const { config } = state;
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
