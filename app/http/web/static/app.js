// The page's shell: sign-in, sign-out and switching between the views.

import { api, forget, onSignedOut, remember, session } from './api.js';
import { showBuckets } from './buckets.js';
import { showFiles } from './files.js';
import { showShares } from './shares.js';
import { hideStatus, showStatus } from './status.js';
import { showTrash } from './trash.js';
import { setUpUploads } from './upload.js';

const VIEWS = ['loading', 'signin', 'upload', 'files', 'buckets', 'shares', 'trash', 'status'];
const SHOW = {
  files: showFiles,
  buckets: showBuckets,
  shares: showShares,
  trash: showTrash,
  status: showStatus,
};

function $(id) {
  return document.getElementById(id);
}

function show(view) {
  for (const name of VIEWS) $(`view-${name}`).hidden = name !== view;
  for (const button of document.querySelectorAll('#nav button')) {
    if (button.dataset.view === view) button.setAttribute('aria-current', 'page');
    else button.removeAttribute('aria-current');
  }
  if (view !== 'status') hideStatus();
  if (SHOW[view]) SHOW[view]();
}

function signedIn() {
  $('who').textContent = `Signed in as ${session.keyName}`;
  $('account').hidden = false;
  $('nav').hidden = false;
  $('nav-buckets').hidden = !session.mayBrowseBuckets;
  setUpUploads();
  show('upload');
}

// `problem`: why the session ended (an alert); `note`: news that is not one.
function signedOut({ problem = '', note = '' } = {}) {
  forget();
  $('account').hidden = true;
  $('nav').hidden = true;
  $('signin-error').textContent = problem;
  $('signin-note').textContent = note;
  show('signin');
  $('key').focus();
}

$('signin-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const button = event.submitter || $('signin-form').querySelector('button');
  $('signin-error').textContent = '';
  $('signin-note').textContent = '';
  button.disabled = true;
  try {
    remember(await api('POST', '/api/session', { key: $('key').value.trim() }));
    $('key').value = '';
    signedIn();
  } catch (error) {
    $('signin-error').textContent = `Sign-in failed: ${error.message}`;
  } finally {
    button.disabled = false;
  }
});

$('sign-out').addEventListener('click', async () => {
  try {
    await api('DELETE', '/api/session');
  } finally {
    signedOut({ note: 'Signed out.' });
  }
});

for (const button of document.querySelectorAll('#nav button')) {
  button.addEventListener('click', () => show(button.dataset.view));
}

onSignedOut((error) => signedOut({ problem: error.message }));

async function start() {
  try {
    remember(await api('GET', '/api/session'));
    signedIn();
  } catch {
    signedOut();
  }
}

start();
