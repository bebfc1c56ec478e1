// The web console of the durable ReAct agent: ES modules, no build step, nothing from outside
// (index.html loads this one; its CSP allows scripts from this origin only, and no eval).
// Every text from the API goes into the page through textContent (dom.js's `h`), never HTML.
import { api } from './api.js';
import { ConversationView } from './conversation.js';
import { $, fill, h, show } from './dom.js';
import { HomeView } from './home.js';
import { MemoryView } from './memory.js';
import { list, refreshList, renderList, scheduleList, setupNewConversation } from './inbox.js';
import { showPrincipal } from './roles.js';
import { validate } from './schema.js';
import { NARROW, state } from './state.js';
import { setupToken } from './token.js';

/** The view the address names: a conversation (#/c/<id>), the memory (#/memories), or the
 *  home view. */
function route() {
  const main = $('[data-testid="main"]');
  const match = /^#\/c\/(.+)$/.exec(location.hash);
  let cid = null;
  if (match) {
    try { cid = decodeURIComponent(match[1]); } catch { cid = null; }
  }
  if (cid && state.current && state.current.cid === cid) return;
  if (state.current) state.current.destroy();
  if (state.home) state.home.destroy();
  state.current = null;
  state.home = null;
  const memories = !cid && location.hash === '#/memories';
  // Which pane a narrow screen shows: the conversation (or the memory), or the inbox and the list.
  $('.layout').dataset.view = cid || memories ? 'conversation' : 'home';
  if (NARROW.matches) window.scrollTo(0, 0);
  if (cid) state.current = new ConversationView(main, cid);
  else if (memories) state.home = new MemoryView(main);
  else state.home = new HomeView(main);
  list.key = '';
  renderList();
}

async function boot() {
  try {
    state.config = await api('GET', '/config');
    showPrincipal();
    show($('[data-testid="token-button"]'), state.config.auth_required);
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
  if (state.current) {
    state.current.destroy();
    state.current = null;
  }
  route();
  refreshList();
  scheduleList();
}

window.agentConsole = { validate }; // for the tests and the curious

function start() {
  setupToken(boot);
  setupNewConversation();
  window.addEventListener('hashchange', route);
  boot();
}

// A module runs once the page is parsed (it is deferred), before DOMContentLoaded.
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
