// The operator's view (GET /api/status), refreshed while it is shown: a row
// per bot, the upload budget, the GC backlog, how full each storage chat is,
// the stored data's state (objects degraded, lost, repaired) and a
// throughput chart.

import { api, el, formatBytes, formatDuration } from './api.js';

const REFRESH_MS = 5000;
const CHART_SECONDS = 600;
const UPLOAD_COLOUR = '#2a7ab8';
const DOWNLOAD_COLOUR = '#d9822b';
const UPLOAD_FILL = 'rgba(42, 122, 184, 0.18)';

let timer = null;

function $(id) {
  return document.getElementById(id);
}

export function showStatus() {
  hideStatus();
  refresh();
  timer = setInterval(refresh, REFRESH_MS);
}

export function hideStatus() {
  clearInterval(timer);
  timer = null;
}

async function refresh() {
  let status;
  try {
    status = await api('GET', '/api/status');
  } catch (error) {
    $('status-error').textContent = `The status cannot be read: ${error.message}`;
    return;
  }
  $('status-error').textContent = '';
  const lately = formatDuration(status.recent_seconds);
  $('recent-sends-head').textContent = `Sends (last ${lately})`;
  $('recent-bytes-head').textContent = `Bytes (last ${lately})`;
  $('bots-body').replaceChildren(
    ...(status.bots_hidden ? [hiddenRow()] : status.bots.map(botRow)),
  );
  facts(status);
  drawChart(status.throughput, status.sample_seconds);
}

function hiddenRow() {
  return el(
    'tr',
    {},
    el('td', { colspan: '5', text: 'The bots are not shown: METRICS_ACCESS=off.' }),
  );
}

function botRow(bot) {
  let state = 'usable';
  let stateClass = 'ok';
  if (!bot.usable) {
    state = 'not usable (Telegram refused its token)';
    stateClass = 'bad';
  } else if (bot.cooling_down_seconds > 0) {
    state = `cooling down, ${formatDuration(bot.cooling_down_seconds)} left`;
    stateClass = 'warn';
  } else if (bot.running) {
    state = 'usable, working';
  }
  const name = bot.username ? `@${bot.username}` : `bot ${bot.bot_id}`;
  return el(
    'tr',
    { 'data-bot-id': String(bot.bot_id) },
    el('td', { class: 'name', 'data-label': 'Bot', text: `${name} (${bot.bot_id})` }),
    el('td', { 'data-label': 'State' }, el('span', { class: `state ${stateClass}`, text: state })),
    el('td', { 'data-label': 'Queue', text: String(bot.queued) }),
    el('td', { 'data-label': 'Sends lately', text: `${bot.recent_sends} (all: ${bot.total_sends})` }),
    el('td', { 'data-label': 'Bytes lately', text: formatBytes(bot.recent_bytes) }),
  );
}

function facts(status) {
  const budget = status.upload_budget;
  const items = [
    ['Upload buffers in use', `${budget.buffers_in_use} of ${budget.buffers}`],
    ['Uploads waiting for a buffer', String(budget.waiting_uploads)],
    [
      'Staging spool',
      budget.spool_enabled
        ? `${formatBytes(budget.spool_bytes)} of ${formatBytes(budget.spool_max_bytes)}`
        : 'off',
    ],
    [
      'Not yet in Telegram (this disk only)',
      `${formatBytes(budget.unflushed_bytes)}, oldest ${Math.round(budget.oldest_unflushed_seconds)} s`,
    ],
    ['Messages waiting to be deleted (GC)', String(status.gc_backlog)],
    ['Messages left in the chats for good (too old to delete)', String(status.left_in_channel)],
    ...status.chats.map(chatFill),
  ];
  const data = status.durability;
  if (data.counted) {
    items.push(
      [`Objects below ${data.replicas} intact copies (being repaired)`, String(data.degraded_objects)],
      ['Objects lost (no intact copy left)', String(data.lost_objects)],
      ['Copies repaired since the start', String(data.repaired)],
    );
  }
  $('facts').replaceChildren(
    ...items.flatMap(([term, value]) => [el('dt', { text: term }), el('dd', { text: value })]),
  );
}

// A storage chat's messages against CHAT_MESSAGE_LIMIT; a full one takes no new writes.
function chatFill(chat) {
  if (!chat.limit) {
    return [`Storage chat ${chat.chat_id}`, `${chat.messages} messages`];
  }
  const share = Math.floor((100 * chat.messages) / chat.limit);
  const state = chat.full ? ': full, takes no new files' : '';
  return [
    `Storage chat ${chat.chat_id}`,
    `${chat.messages} of ${chat.limit} messages (${share} %)${state}`,
  ];
}

function drawChart(points, interval) {
  const canvas = $('chart');
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 640;
  const height = canvas.clientHeight || 180;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const context = canvas.getContext('2d');
  context.setTransform(ratio, 0, 0, ratio, 0, 0);
  context.clearRect(0, 0, width, height);

  const now = Date.now() / 1000;
  const peak = Math.max(
    1,
    ...points.map((p) => Math.max(p.upload_bytes_per_second, p.download_bytes_per_second)),
  );
  const left = 4;
  const top = 18;
  const plotWidth = width - left - 4;
  const plotHeight = height - top - 18;
  const x = (at) => left + plotWidth * (1 - Math.min(CHART_SECONDS, now - at) / CHART_SECONDS);
  const y = (value) => top + plotHeight * (1 - value / peak);

  context.strokeStyle = '#ccd3da';
  context.lineWidth = 1;
  context.strokeRect(left + 0.5, top + 0.5, plotWidth - 1, plotHeight);
  context.fillStyle = '#5b6670';
  context.font = '12px system-ui, sans-serif';
  context.textBaseline = 'top';
  context.fillText(`${formatBytes(peak)}/s`, left + 4, 2);
  context.textBaseline = 'bottom';
  context.fillText('10 min ago', left, height);
  context.textAlign = 'right';
  context.fillText('now', left + plotWidth, height);
  context.textAlign = 'left';

  // Each point is the rate over the sample interval that ends at it: a step.
  const trace = (field) => {
    context.beginPath();
    points.forEach((point, i) => {
      const py = y(point[field]);
      if (i === 0) context.moveTo(x(point.at - interval), py);
      else context.lineTo(x(point.at - interval), py);
      context.lineTo(x(point.at), py);
    });
  };
  if (points.length > 0) {
    trace('upload_bytes_per_second');
    context.lineTo(x(points[points.length - 1].at), y(0));
    context.lineTo(x(points[0].at - interval), y(0));
    context.closePath();
    context.fillStyle = UPLOAD_FILL;
    context.fill();
  }
  for (const [field, colour] of [
    ['download_bytes_per_second', DOWNLOAD_COLOUR],
    ['upload_bytes_per_second', UPLOAD_COLOUR],
  ]) {
    trace(field);
    context.strokeStyle = colour;
    context.lineWidth = 2;
    context.stroke();
  }
  const last = points[points.length - 1];
  $('chart-peak').textContent = last
    ? `now: ${formatBytes(last.upload_bytes_per_second)}/s up, ` +
      `${formatBytes(last.download_bytes_per_second)}/s down`
    : '';
}
