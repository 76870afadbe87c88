// The native files, a page at a time (GET /api/files), newest first (or
// oldest), searchable by name prefix; a click on the name of an image, a
// video, a sound, a PDF or a text previews it in place (over Range); share,
// copy link, download, delete.

import { api, copyLink, el, formatBytes, formatDate, shown, toast } from './api.js';
import { preview, previewKind } from './preview.js';
import { openShareDialog } from './shares.js';

const PAGE_SIZE = 25;

let ready = false;
let query = '';
// The cursor of the page shown, and the next one (null: no more pages).
let cursor = null;
let nextCursor = null;

function $(id) {
  return document.getElementById(id);
}

export function showFiles() {
  if (!ready) {
    ready = true;
    $('search-form').addEventListener('submit', (event) => {
      event.preventDefault();
      query = $('search').value.trim();
      load(null);
    });
    $('files-order').addEventListener('change', () => load(null));
    $('files-first').addEventListener('click', () => load(null));
    $('files-next').addEventListener('click', () => load(nextCursor));
  }
  load(cursor);
}

async function load(from) {
  const params = new URLSearchParams({ limit: String(PAGE_SIZE), order: $('files-order').value });
  if (from) params.set('cursor', from);
  if (query) params.set('prefix', query);
  $('files-error').textContent = '';
  let page;
  try {
    page = await api('GET', `/api/files?${params}`);
  } catch (error) {
    $('files-error').textContent = `The files cannot be listed: ${error.message}`;
    return;
  }
  cursor = from;
  nextCursor = page.next_cursor;
  $('files-body').replaceChildren(...page.items.map(row));
  $('files-empty').hidden = page.items.length > 0;
  $('files-empty').textContent = query ? `No file name starts with “${query}”.` : 'No files yet.';
  $('files-next').disabled = !nextCursor;
  $('files-first').disabled = !from;
}

function row(file) {
  const copy = el('button', { type: 'button', text: 'Copy link' });
  copy.setAttribute('aria-label', `Copy the link to ${shown(file.file_name)}`);
  copy.addEventListener('click', () => copyLink(file.download_url));
  const download = el('a', { href: file.download_url, class: 'button', download: '', text: 'Download' });
  download.setAttribute('aria-label', `Download ${shown(file.file_name)}`);
  const remove = el('button', { type: 'button', class: 'danger', text: 'Delete' });
  remove.setAttribute('aria-label', `Delete ${shown(file.file_name)}`);
  remove.addEventListener('click', () => deleteFile(file));
  const share = el('button', { type: 'button', text: 'Share' });
  share.setAttribute('aria-label', `Share ${shown(file.file_name)}`);
  share.addEventListener('click', () => openShareDialog(file));
  const label = file.stored_path ? shown(file.stored_path) : shown(file.file_name);
  const kind = previewKind(file.mime_type);
  let name;
  if (kind) {
    const button = el('button', { type: 'button', class: 'link', text: label });
    button.setAttribute('aria-label', `Preview ${shown(file.file_name)}`);
    button.addEventListener('click', () => togglePreview(button, file, kind));
    name = el('td', { class: 'name', 'data-label': 'Name' }, button);
  } else {
    name = el('td', { class: 'name', 'data-label': 'Name', text: label });
  }
  return el(
    'tr',
    { 'data-public-id': file.public_id },
    name,
    el('td', { 'data-label': 'Size', text: formatBytes(file.size_bytes) }),
    el('td', { class: 'type', 'data-label': 'Type', text: file.mime_type }),
    // When it was uploaded, or replaced: what the order goes by.
    el('td', { 'data-label': 'Uploaded', text: formatDate(file.updated_at) }),
    el('td', { class: 'actions' }, share, copy, download, remove),
  );
}

// The preview goes in a row of its own under the file's; a second click closes it.
function togglePreview(button, file, kind) {
  const row = button.closest('tr');
  const open = row.nextElementSibling;
  if (open && open.classList.contains('preview-row')) {
    open.remove();
    return;
  }
  const area = el('div', { class: 'preview-area' });
  row.after(el('tr', { class: 'preview-row' }, el('td', { colspan: '5' }, area)));
  const src = `${file.download_url}?disposition=inline`;
  preview(area, { kind, src, name: shown(file.file_name) });
  const close = area.querySelector('button');
  if (close) close.addEventListener('click', () => area.closest('tr').remove());
}

async function deleteFile(file) {
  if (!window.confirm(`Delete “${shown(file.file_name)}”? Its link stops working.`)) return;
  try {
    await api('DELETE', `/api/files/${encodeURIComponent(file.public_id)}`);
  } catch (error) {
    $('files-error').textContent = `“${shown(file.file_name)}” was not deleted: ${error.message}`;
    return;
  }
  // In place of a note about its link ("Link copied"), which no longer works.
  toast(`Deleted “${shown(file.file_name)}”`);
  load(cursor);
}
