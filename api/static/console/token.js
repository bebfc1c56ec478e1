// The token box: asked for when the API answers 401, kept in this browser's localStorage.
import { $, message, show } from './dom.js';
import { state, TOKEN_KEY } from './state.js';

const tokenBox = () => $('[data-testid="token-box"]');

export function askForToken(why) {
  message($('[data-testid="token-why"]'), state.token ? `The token was refused (${why}).` : '');
  show(tokenBox(), true);
  show($('[data-testid="token-button"]'), true);
}

/** The box's controls; `saved` runs once a token is entered (the console boots again). */
export function setupToken(saved) {
  tokenBox().addEventListener('submit', (event) => {
    event.preventDefault();
    state.token = tokenBox().elements.token.value.trim();
    localStorage.setItem(TOKEN_KEY, state.token);
    tokenBox().reset();
    show(tokenBox(), false);
    saved();
  });
  $('[data-testid="token-clear"]').addEventListener('click', () => {
    state.token = '';
    localStorage.removeItem(TOKEN_KEY);
    tokenBox().reset();
  });
  $('[data-testid="token-button"]').addEventListener('click', () => {
    show(tokenBox(), tokenBox().hidden);
  });
}
