// A file shown in place, by the browser's own players: images, audio and
// video (over Range: a video seeks), PDFs in a frame, text in a <pre>. The
// bytes come with the service's sandbox policy (default-src 'none'; sandbox),
// so nothing in them runs on this origin. Used by the share page and by
// the main page's Files view.

// Text shown at most (the rest is downloaded, not shown).
export const TEXT_PREVIEW_BYTES = 256 * 1024;

// `kind`: image, video, audio, pdf or text (app/http/web/share_page.py's preview_kind).
export function previewKind(type) {
  const media = (type || '').split(';')[0].trim().toLowerCase();
  const major = media.split('/')[0];
  if (['image', 'video', 'audio'].includes(major)) return major;
  if (media === 'application/pdf') return 'pdf';
  const texts = ['application/json', 'application/xml', 'application/javascript',
    'application/x-yaml', 'application/yaml', 'application/toml'];
  if (major === 'text' || texts.includes(media) || media.endsWith('+json') || media.endsWith('+xml')) {
    return 'text';
  }
  return null;
}

export function preview(area, { kind, src, name }) {
  area.replaceChildren();
  const label = `Preview of ${name}`;
  let node;
  if (kind === 'image') {
    node = document.createElement('img');
    node.alt = label;
    node.src = src;
  } else if (kind === 'video' || kind === 'audio') {
    node = document.createElement(kind);
    node.controls = true;
    node.preload = 'metadata';
    node.setAttribute('aria-label', label);
    node.src = src;
  } else if (kind === 'pdf') {
    node = document.createElement('iframe');
    node.title = label;
    node.src = src;
  } else if (kind === 'text') {
    node = document.createElement('pre');
    node.setAttribute('aria-label', label);
    node.textContent = 'Loading…';
    showText(node, src);
  } else {
    return;
  }
  node.className = `preview-${kind}`;
  const close = document.createElement('button');
  close.type = 'button';
  close.textContent = 'Close preview';
  close.addEventListener('click', () => area.replaceChildren());
  area.append(node, close);
}

async function showText(node, src) {
  try {
    const response = await fetch(src, {
      headers: { Range: `bytes=0-${TEXT_PREVIEW_BYTES - 1}` },
      credentials: 'same-origin',
    });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const bytes = await response.arrayBuffer();
    let text = new TextDecoder('utf-8').decode(bytes);
    const total = Number((response.headers.get('Content-Range') || '').split('/')[1]);
    if (total > bytes.byteLength) text += `\n\n… (the first ${bytes.byteLength} of ${total} bytes)`;
    node.textContent = text;
  } catch (error) {
    node.textContent = `The text cannot be shown: ${error.message}`;
  }
}
