// Uploads through tus-js-client (vendor/tus.min.js, the global `tus`) to the
// service's tus endpoint. tus-js-client remembers each upload's URL in
// localStorage under a fingerprint of the file, so choosing the same file
// again after a reload or a lost connection continues where it stopped.

import { copyLink, el, formatBytes, formatDuration, session } from './api.js';

const ENDPOINT = '/api/tus/';
// One PATCH per 16 MiB: progress survives a lost connection in steps this big
// at most, and each request stays short enough to retry cheaply.
const CHUNK_SIZE = 16 * 1024 * 1024;
// Retries after a lost connection (ms); after the last, the upload waits for
// Resume (or for the browser to be online again).
const RETRY_DELAYS = [0, 1000, 3000, 5000, 10000, 20000, 30000];
// Speed is measured over this many seconds of progress events.
const SPEED_WINDOW_SECONDS = 5;
// The response header with the finished file's download URL (app/http/api/tus.py).
const DOWNLOAD_URL_HEADER = 'X-File-Url';

let ready = false;
const active = new Set();

function $(id) {
  return document.getElementById(id);
}

export function setUpUploads() {
  $('limit-hint').textContent = session.maxUploadSize
    ? `Up to ${formatBytes(session.maxUploadSize)} per file.`
    : '';
  listUnfinished();
  if (ready) return;
  ready = true;
  const input = $('file-input');
  $('choose').addEventListener('click', () => input.click());
  input.addEventListener('change', () => {
    addFiles(input.files);
    input.value = '';
  });
  const drop = $('drop');
  drop.addEventListener('dragover', (event) => {
    event.preventDefault();
    drop.classList.add('over');
  });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (event) => {
    event.preventDefault();
    drop.classList.remove('over');
    addFiles(event.dataTransfer.files);
  });
  // Back online: uploads that gave up on the connection carry on by themselves.
  window.addEventListener('online', () => {
    for (const item of active) if (item.failedOffline) item.resume();
  });
}

function addFiles(files) {
  for (const file of files) new UploadItem(file);
}

async function listUnfinished() {
  const list = $('unfinished-list');
  list.replaceChildren();
  let stored = [];
  try {
    stored = await tus.defaultOptions.urlStorage.findAllUploads();
  } catch {
    stored = [];
  }
  const unfinished = stored.filter((upload) => upload.metadata && upload.metadata.filename);
  for (const upload of unfinished) {
    const size = Number(upload.size);
    const started = new Date(upload.creationTime).toLocaleString();
    list.append(
      el('li', { text: `${upload.metadata.filename} (${formatBytes(size)}), started ${started}` }),
    );
  }
  $('unfinished').hidden = unfinished.length === 0;
}

class UploadItem {
  constructor(file) {
    this.file = file;
    this.samples = [];
    this.failedOffline = false;
    this.progress = el('progress', { max: '100', value: '0' });
    this.percent = el('span', { class: 'percent', text: '0 %' });
    this.detail = el('span', { class: 'detail', text: 'Starting…' });
    this.pauseButton = el('button', { type: 'button', text: 'Pause' });
    this.resumeButton = el('button', { type: 'button', text: 'Resume', hidden: true });
    this.cancelButton = el('button', { type: 'button', text: 'Cancel' });
    this.links = el('span', { class: 'links' });
    const label = `${file.name} (${formatBytes(file.size)})`;
    this.progress.setAttribute('aria-label', `Progress of ${file.name}`);
    for (const [button, verb] of [
      [this.pauseButton, 'Pause'],
      [this.resumeButton, 'Resume'],
      [this.cancelButton, 'Cancel'],
    ]) {
      button.setAttribute('aria-label', `${verb} ${file.name}`);
    }
    this.node = el(
      'li',
      { class: 'upload' },
      el('div', { class: 'name', text: label }),
      this.progress,
      el('div', { class: 'line' }, this.percent, this.detail),
      el('div', { class: 'actions' }, this.pauseButton, this.resumeButton, this.cancelButton, this.links),
    );
    $('uploads').prepend(this.node);
    this.pauseButton.addEventListener('click', () => this.pause());
    this.resumeButton.addEventListener('click', () => this.resume());
    this.cancelButton.addEventListener('click', () => this.cancel());

    if (session.maxUploadSize && file.size > session.maxUploadSize) {
      this.fail(
        `file larger than ${formatBytes(session.maxUploadSize)}, the service's limit (MAX_UPLOAD_SIZE)`,
      );
      return;
    }
    this.upload = new tus.Upload(file, {
      endpoint: ENDPOINT,
      chunkSize: CHUNK_SIZE,
      retryDelays: RETRY_DELAYS,
      removeFingerprintOnSuccess: true,
      metadata: { filename: file.name, filetype: file.type || 'application/octet-stream' },
      headers: { 'X-CSRF-Token': session.csrf },
      onAfterResponse: (request, response) => this.onResponse(request, response),
      onProgress: (sent, total) => this.onProgress(sent, total),
      onSuccess: (payload) => this.onSuccess(payload),
      onError: (error) => this.onError(error),
    });
    active.add(this);
    this.begin();
  }

  async begin() {
    try {
      const previous = await this.upload.findPreviousUploads();
      if (previous.length > 0) this.upload.resumeFromPreviousUpload(previous[0]);
    } catch {
      // No storage (private mode): the upload starts from zero.
    }
    this.upload.start();
    listUnfinished();
  }

  onResponse(request, response) {
    // HEAD is how a stored upload is picked up again: say where it resumes.
    if (request.getMethod() === 'HEAD' && response.getStatus() === 200) {
      const offset = Number(response.getHeader('Upload-Offset'));
      if (offset > 0) {
        this.resumedAt = offset;
        this.node.dataset.resumedAt = String(offset);
        this.detail.textContent = `Resuming from ${formatBytes(offset)}`;
      }
    }
  }

  onProgress(sent, total) {
    const now = performance.now() / 1000;
    this.samples.push([now, sent]);
    while (this.samples.length > 2 && now - this.samples[0][0] > SPEED_WINDOW_SECONDS) {
      this.samples.shift();
    }
    // 100 % is for a stored file (onSuccess): the last request may take a
    // moment after its last byte is sent, while the service stores it.
    const percent = total ? Math.min(99, Math.floor((sent / total) * 100)) : 0;
    this.progress.value = percent;
    this.percent.textContent = `${percent} %`;
    if (sent === total) {
      this.detail.textContent = `${formatBytes(total)} sent · storing…`;
      return;
    }
    const [then, before] = this.samples[0];
    const speed = now > then ? (sent - before) / (now - then) : 0;
    const eta = speed > 0 ? (total - sent) / speed : Infinity;
    const resumed = this.resumedAt ? ` · resumed from ${formatBytes(this.resumedAt)}` : '';
    this.detail.textContent =
      `${formatBytes(sent)} of ${formatBytes(total)} · ${formatBytes(speed)}/s · ` +
      `${formatDuration(eta)} left${resumed}`;
  }

  onSuccess(payload) {
    active.delete(this);
    this.progress.value = 100;
    this.percent.textContent = '100 %';
    this.node.classList.add('done');
    this.pauseButton.hidden = true;
    this.resumeButton.hidden = true;
    this.cancelButton.hidden = true;
    const url = payload && payload.lastResponse && payload.lastResponse.getHeader(DOWNLOAD_URL_HEADER);
    this.detail.textContent = `Done: ${formatBytes(this.file.size)} stored`;
    if (url) {
      const copy = el('button', { type: 'button', text: 'Copy link' });
      copy.setAttribute('aria-label', `Copy the link to ${this.file.name}`);
      copy.addEventListener('click', () => copyLink(url));
      this.links.append(copy, el('a', { href: url, class: 'button', download: '', text: 'Download' }));
    }
    listUnfinished();
  }

  onError(error) {
    const response = error.originalResponse;
    if (!response) {
      this.failedOffline = true;
      this.fail('the connection was lost: press Resume to continue (or wait to be back online)', true);
      return;
    }
    this.fail(describeResponse(response.getStatus(), response.getBody()), true);
  }

  fail(message, resumable = false) {
    this.node.classList.add('failed');
    this.detail.textContent = `Failed: ${message}`;
    this.detail.setAttribute('role', 'alert');
    this.pauseButton.hidden = true;
    this.resumeButton.hidden = !resumable;
    if (!resumable) this.cancelButton.textContent = 'Remove';
  }

  pause() {
    this.upload.abort();
    this.pauseButton.hidden = true;
    this.resumeButton.hidden = false;
    this.detail.textContent = 'Paused';
  }

  resume() {
    this.failedOffline = false;
    this.node.classList.remove('failed');
    this.detail.removeAttribute('role');
    this.detail.textContent = 'Resuming…';
    this.pauseButton.hidden = false;
    this.resumeButton.hidden = true;
    this.samples = [];
    this.upload.start();
  }

  async cancel() {
    active.delete(this);
    if (this.upload) {
      // true: also ends the upload on the service, which frees its space.
      await this.upload.abort(true).catch(() => {});
    }
    this.node.remove();
    listUnfinished();
  }
}

function describeResponse(status, body) {
  let detail = null;
  try {
    detail = JSON.parse(body).detail;
  } catch {
    detail = body && body.length < 300 ? body.trim() : null;
  }
  if (status === 413) return detail || 'file larger than the service accepts';
  if (status === 401) return 'the sign-in has expired: sign in again, then choose the file again';
  if (status === 503 && !detail) return 'no usable bot: the service cannot store right now';
  return detail || `the service answered HTTP ${status}`;
}
