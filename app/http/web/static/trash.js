// The trash (GET /api/trash): deleted and replaced files the key may
// restore, until they expire. Restore puts one back under its old name; when
// a live file holds that name, the page asks for another (?as=).

import { api, el, formatBytes, formatDate, shown, toast } from './api.js';

let ready = false;
let nextCursor = null;

function $(id) {
  return document.getElementById(id);
}

export function showTrash() {
  if (!ready) {
    ready = true;
    $('trash-first').addEventListener('click', () => load(null));
    $('trash-next').addEventListener('click', () => load(nextCursor));
  }
  load(null);
}

function where(item) {
  return item.bucket ? `s3://${item.bucket}/${item.key}` : item.name;
}

async function load(from) {
  const params = new URLSearchParams({ limit: '25' });
  if (from) params.set('cursor', from);
  $('trash-error').textContent = '';
  let page;
  try {
    page = await api('GET', `/api/trash?${params}`);
  } catch (error) {
    $('trash-error').textContent = `The trash cannot be listed: ${error.message}`;
    return;
  }
  nextCursor = page.next_cursor;
  $('trash-body').replaceChildren(...page.items.map(row));
  $('trash-empty').hidden = page.items.length > 0;
  $('trash-next').disabled = !nextCursor;
  $('trash-first').disabled = !from;
}

function row(item) {
  const restore = el('button', { type: 'button', text: 'Restore' });
  restore.setAttribute('aria-label', `Restore ${shown(where(item))}`);
  restore.addEventListener('click', () => restoreItem(item));
  return el(
    'tr',
    { 'data-public-id': item.public_id },
    el('td', { class: 'name', 'data-label': 'Name', text: shown(where(item)) }),
    el('td', { 'data-label': 'Size', text: formatBytes(item.size_bytes) }),
    el('td', { 'data-label': 'Why', text: item.reason }),
    el('td', { 'data-label': 'Trashed', text: formatDate(item.trashed_at) }),
    el('td', { 'data-label': 'Until', text: formatDate(item.expires_at) }),
    el('td', { class: 'actions' }, restore),
  );
}

async function restoreItem(item, asName = null) {
  const path = `/api/trash/${encodeURIComponent(item.public_id)}/restore`;
  try {
    await api('POST', asName === null ? path : `${path}?as=${encodeURIComponent(asName)}`);
  } catch (error) {
    if (error.status === 409) {
      const suggested = `${item.key || item.name} (restored)`;
      const other = window.prompt(`${error.message}\n\nRestore under this name:`, suggested);
      if (other) restoreItem(item, other);
      return;
    }
    $('trash-error').textContent = `“${shown(where(item))}” was not restored: ${error.message}`;
    return;
  }
  toast(`Restored “${shown(asName || where(item))}”`);
  load(null);
}
