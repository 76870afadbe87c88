// A share's page (/s/{token}): the preview a visitor asks for. Nothing is
// loaded before the click (a page view never counts as a download); then
// the browser's own players read the file over Range, so a video seeks.

import { preview } from './preview.js';

for (const button of document.querySelectorAll('button.preview')) {
  button.addEventListener('click', () => {
    const area = document.getElementById('preview');
    preview(area, {
      kind: button.dataset.kind,
      src: button.dataset.src,
      name: button.dataset.name,
    });
    area.scrollIntoView({ block: 'nearest' });
  });
}
