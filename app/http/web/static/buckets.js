// The S3 API's buckets, read-only: the buckets, then one bucket's folders
// (common prefixes at "/") and objects, a page at a time.

import { api, copyLink, el, formatBytes, formatDate, shown } from './api.js';

const PAGE_SIZE = 100;

let bucket = null;
let prefix = '';
let after = null;
let ready = false;

function $(id) {
  return document.getElementById(id);
}

export function showBuckets() {
  if (!ready) {
    ready = true;
    $('objects-more').addEventListener('click', () => loadPage(true));
  }
  if (bucket === null) loadBuckets();
  else loadPage(false);
}

function crumbs() {
  const parts = [el('button', { type: 'button', class: 'link', text: 'All buckets' })];
  parts[0].addEventListener('click', () => {
    bucket = null;
    loadBuckets();
  });
  if (bucket !== null) {
    const levels = [''].concat(
      prefix
        .split('/')
        .filter(Boolean)
        .map((_, i, all) => `${all.slice(0, i + 1).join('/')}/`),
    );
    for (const level of levels) {
      const name = level ? level.split('/').slice(-2, -1)[0] : bucket;
      const button = el('button', { type: 'button', class: 'link', text: shown(name) });
      button.addEventListener('click', () => open(bucket, level));
      parts.push(el('span', { 'aria-hidden': 'true', text: ' / ' }), button);
    }
  }
  $('crumbs').replaceChildren(...parts);
}

async function loadBuckets() {
  $('buckets-error').textContent = '';
  $('objects-table').hidden = true;
  $('objects-more').hidden = true;
  crumbs();
  let buckets;
  try {
    buckets = await api('GET', '/api/buckets');
  } catch (error) {
    $('buckets-error').textContent = `The buckets cannot be listed: ${error.message}`;
    return;
  }
  $('bucket-list').replaceChildren(
    ...buckets.map((b) => {
      const button = el('button', { type: 'button', class: 'folder', text: b.name });
      button.addEventListener('click', () => open(b.name, ''));
      return el('li', {}, button);
    }),
  );
  if (buckets.length === 0) $('bucket-list').append(el('li', { class: 'hint', text: 'No buckets.' }));
}

function open(name, at) {
  bucket = name;
  prefix = at;
  loadPage(false);
}

async function loadPage(more) {
  $('buckets-error').textContent = '';
  crumbs();
  const params = new URLSearchParams({ prefix, limit: String(PAGE_SIZE) });
  if (more && after) params.set('after', after);
  let page;
  try {
    page = await api('GET', `/api/buckets/${encodeURIComponent(bucket)}?${params}`);
  } catch (error) {
    $('buckets-error').textContent = `The bucket cannot be listed: ${error.message}`;
    return;
  }
  after = page.next_after;
  const folders = page.folders.map((folder) => {
    const button = el('button', { type: 'button', class: 'folder', text: shown(folder.slice(prefix.length)) });
    button.addEventListener('click', () => open(bucket, folder));
    return el('li', {}, button);
  });
  const rows = page.objects.map((object) => {
    const copy = el('button', { type: 'button', text: 'Copy link' });
    copy.setAttribute('aria-label', `Copy the link to ${shown(object.key)}`);
    copy.addEventListener('click', () => copyLink(object.download_url));
    const download = el('a', { href: object.download_url, class: 'button', download: '', text: 'Download' });
    download.setAttribute('aria-label', `Download ${shown(object.key)}`);
    return el(
      'tr',
      {},
      el('td', { class: 'name', 'data-label': 'Key', text: shown(object.key.slice(prefix.length)) }),
      el('td', { 'data-label': 'Size', text: formatBytes(object.size_bytes) }),
      el('td', { class: 'type', 'data-label': 'Type', text: object.mime_type }),
      el('td', { 'data-label': 'Date', text: formatDate(object.updated_at) }),
      el('td', { class: 'actions' }, copy, download),
    );
  });
  if (more) {
    $('bucket-list').append(...folders);
    $('objects-body').append(...rows);
  } else {
    $('bucket-list').replaceChildren(...folders);
    $('objects-body').replaceChildren(...rows);
  }
  $('objects-table').hidden = $('objects-body').children.length === 0;
  $('objects-more').hidden = !after;
  if (!more && folders.length === 0 && rows.length === 0) {
    $('bucket-list').append(el('li', { class: 'hint', text: 'Empty.' }));
  }
}
