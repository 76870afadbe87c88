// Talking to the service: JSON requests with the session cookie, the CSRF
// token on every write, and errors turned into sentences.

export const session = { csrf: null, keyName: null, maxUploadSize: 0, mayBrowseBuckets: false };

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// Listeners told when the service says the sign-in is gone (401).
const signedOutListeners = [];
export function onSignedOut(listener) {
  signedOutListeners.push(listener);
}

export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET' && session.csrf) headers['X-CSRF-Token'] = session.csrf;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
    });
  } catch {
    throw new ApiError(0, 'the service cannot be reached: check the connection');
  }
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    const error = new ApiError(response.status, describe(response.status, data));
    if (response.status === 401 && path !== '/api/session') {
      for (const listener of signedOutListeners) listener(error);
    }
    throw error;
  }
  return data;
}

// A sentence for an error answer ({"error": ..., "detail": ...}).
export function describe(status, data) {
  if (data && typeof data.detail === 'string') return data.detail;
  if (status === 0) return 'the service cannot be reached: check the connection';
  if (status >= 500) return `the service failed (HTTP ${status}); try again shortly`;
  return `the request was refused (HTTP ${status})`;
}

export function remember(data) {
  session.csrf = data.csrf_token;
  session.keyName = data.key_name;
  session.maxUploadSize = data.max_upload_size;
  session.mayBrowseBuckets = data.may_browse_buckets;
}

export function forget() {
  session.csrf = null;
  session.keyName = null;
}

const UNITS = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];

// Bidi controls (U+202E and its kind; app/kit/bidi.py keeps the same list)
// reorder the text around them: "invoice\u202egnp.exe" would read
// "invoiceexe.png". Names and keys are shown with each one spelt out.
const BIDI_CONTROLS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

export function shown(name) {
  return name.replace(BIDI_CONTROLS, (ch) => {
    const code = ch.codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
    return `[U+${code}]`;
  });
}

export function formatBytes(bytes) {
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  if (unit === 0) {
    const whole = Math.round(value);
    return `${whole} ${whole === 1 ? 'byte' : 'bytes'}`;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${UNITS[unit]}`;
}

export function formatDuration(seconds) {
  if (!Number.isFinite(seconds)) return '…';
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export function formatDate(iso) {
  return new Date(iso).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });
}

// An element with text and attributes: data becomes text nodes, never markup.
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === false || value === null || value === undefined) continue;
    if (name === 'class') node.className = value;
    else if (name === 'text') node.textContent = value;
    else node.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children) node.append(child);
  return node;
}

let toastTimer = null;
export function toast(message) {
  const node = document.getElementById('toast');
  node.textContent = message;
  node.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => {
    node.hidden = true;
  }, 4000);
}

export async function copyLink(url) {
  try {
    await navigator.clipboard.writeText(url);
    toast('Link copied');
  } catch {
    // No clipboard (a page served over plain http off localhost): show it.
    toast(`Link: ${url}`);
  }
}
