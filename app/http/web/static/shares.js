// Share links: the dialog that makes one (POST /api/shares) for a file or
// one of the folders it is in, and the Shares view (GET /api/shares) that
// lists each link with its expiry and downloads, to copy, extend or revoke.

import { api, copyLink, el, formatDate, shown, toast } from './api.js';

const PAGE_SIZE = 25;
const DAY = 86400;

let ready = false;
let cursor = null;
let nextCursor = null;

function $(id) {
  return document.getElementById(id);
}

// --- the dialog ---------------------------------------------------------------

let dialogReady = false;
let targets = [];

// The folders a file's path is in, innermost first: "a/b/c.txt" -> ["a/b/", "a/"].
function foldersOf(path) {
  const parts = (path || '').split('/').slice(0, -1);
  const out = [];
  for (let n = parts.length; n > 0; n -= 1) out.push(`${parts.slice(0, n).join('/')}/`);
  return out;
}

export function openShareDialog(file) {
  setUpDialog();
  targets = [{ body: { file: file.public_id }, label: `This file: ${shown(file.file_name)}` }];
  for (const folder of foldersOf(file.stored_path)) {
    targets.push({ body: { folder }, label: `The folder ${shown(folder)}` });
  }
  const what = $('share-what');
  what.replaceChildren(el('legend', { text: 'What' }));
  targets.forEach((target, index) => {
    const id = `share-target-${index}`;
    const input = el('input', { type: 'radio', name: 'share-target', id, value: String(index) });
    if (index === 0) input.checked = true;
    what.append(el('div', { class: 'choice' }, input, el('label', { for: id, text: target.label })));
  });
  $('share-max').value = '';
  $('share-password').value = '';
  $('share-error').textContent = '';
  $('share-result').hidden = true;
  $('share-copy').hidden = true;
  $('share-create').hidden = false;
  $('share-dialog').showModal();
}

function setUpDialog() {
  if (dialogReady) return;
  dialogReady = true;
  $('share-close').addEventListener('click', () => $('share-dialog').close());
  $('share-copy').addEventListener('click', () => copyLink($('share-link').value));
  $('share-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const chosen = document.querySelector('input[name="share-target"]:checked');
    const body = { ...targets[Number(chosen ? chosen.value : 0)].body };
    if ($('share-expires').value) body.expires_in = Number($('share-expires').value);
    if ($('share-max').value) body.max_downloads = Number($('share-max').value);
    if ($('share-password').value) body.password = $('share-password').value;
    $('share-error').textContent = '';
    let made;
    try {
      made = await api('POST', '/api/shares', body);
    } catch (error) {
      $('share-error').textContent = `No link was made: ${error.message}`;
      return;
    }
    $('share-password').value = '';
    $('share-link').value = made.url;
    $('share-result').hidden = false;
    $('share-copy').hidden = false;
    $('share-create').hidden = true;
    $('share-link').select();
  });
}

// --- the view -------------------------------------------------------------------

export function showShares() {
  if (!ready) {
    ready = true;
    $('shares-first').addEventListener('click', () => load(null));
    $('shares-next').addEventListener('click', () => load(nextCursor));
  }
  load(cursor);
}

async function load(from) {
  const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (from) params.set('cursor', from);
  $('shares-error').textContent = '';
  let page;
  try {
    page = await api('GET', `/api/shares?${params}`);
  } catch (error) {
    $('shares-error').textContent = `The shares cannot be listed: ${error.message}`;
    return;
  }
  cursor = from;
  nextCursor = page.next_cursor;
  $('shares-body').replaceChildren(...page.items.map(row));
  $('shares-empty').hidden = page.items.length > 0;
  $('shares-next').disabled = !nextCursor;
  $('shares-first').disabled = !from;
}

function what(share) {
  if (share.kind === 'folder') return `${share.folder} (folder)`;
  return share.name || `${share.file} (not available)`;
}

const STATES = { active: 'ok', expired: 'bad', exhausted: 'bad', unavailable: 'warn' };

function row(share) {
  const name = shown(what(share));
  const copy = el('button', { type: 'button', text: 'Copy link', 'aria-label': `Copy the link to ${name}` });
  copy.addEventListener('click', () => copyLink(share.url));
  const extend = el('button', { type: 'button', text: 'Extend', 'aria-label': `Extend the share of ${name}` });
  extend.addEventListener('click', () => extendShare(share, name));
  const revoke = el('button', { type: 'button', class: 'danger', text: 'Revoke', 'aria-label': `Revoke the share of ${name}` });
  revoke.addEventListener('click', () => revokeShare(share, name));
  const used = share.max_downloads === null ? `${share.downloads}` : `${share.downloads} of ${share.max_downloads}`;
  return el(
    'tr',
    { 'data-share-id': String(share.id) },
    el('td', { class: 'name', 'data-label': 'Shared' },
      el('span', { text: name }),
      share.has_password ? el('span', { class: 'hint', text: ' (password)' }) : '',
      el('a', { class: 'share-link', href: share.url, text: share.url, rel: 'noreferrer' })),
    el('td', { 'data-label': 'Expires', text: share.expires_at ? formatDate(share.expires_at) : 'never' }),
    el('td', { 'data-label': 'Downloads', text: used }),
    el('td', { 'data-label': 'Last download', text: share.last_download_at ? formatDate(share.last_download_at) : '—' }),
    el('td', { 'data-label': 'State' }, el('span', { class: `state ${STATES[share.state] || ''}`, text: share.state })),
    el('td', { class: 'actions' }, copy, extend, revoke),
  );
}

async function extendShare(share, name) {
  const days = window.prompt(`Make “${name}” work for how many more days from now?`, '7');
  if (days === null) return;
  const count = Number(days);
  if (!Number.isFinite(count) || count <= 0) {
    $('shares-error').textContent = 'Give a number of days above 0.';
    return;
  }
  try {
    await api('PATCH', `/api/shares/${share.id}`, { expires_in: Math.round(count * DAY) });
  } catch (error) {
    $('shares-error').textContent = `The share was not extended: ${error.message}`;
    return;
  }
  toast(`Extended by ${count} ${count === 1 ? 'day' : 'days'}`);
  load(cursor);
}

async function revokeShare(share, name) {
  if (!window.confirm(`Revoke the share of “${name}”? Its link stops working at once.`)) return;
  try {
    await api('DELETE', `/api/shares/${share.id}`);
  } catch (error) {
    $('shares-error').textContent = `The share was not revoked: ${error.message}`;
    return;
  }
  toast('Revoked');
  load(cursor);
}
