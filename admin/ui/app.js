'use strict';
// The status page: polls the admin API every 2 s and redraws. Data from the
// API only ever enters the DOM as textContent, never as markup.
//
// The API needs a token (admin.read_token_file or admin.token_file): entered
// once in the form, or given as #token=... in the address (the fragment never
// reaches the server), it is kept in sessionStorage for this tab only and sent
// as an Authorization: Bearer header.

const POLL_MS = 2000;
const HISTORY = 150;  // score samples kept per backend: 5 minutes at 2 s
const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#17becf'];

const scoreHistory = new Map();  // backend name -> recent scores, oldest first

function cell(text, className) {
  const td = document.createElement('td');
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function fillTable(id, rows) {
  const body = document.querySelector('#' + id + ' tbody');
  body.replaceChildren(...rows.map((cells) => {
    const tr = document.createElement('tr');
    tr.append(...cells);
    return tr;
  }));
}

function ms(v) {
  if (v === null || v === undefined || v < 0) return 'never';
  return v < 1000 ? v + ' ms' : (v / 1000).toFixed(1) + ' s';
}

function fixed(v, digits) {
  return typeof v === 'number' ? v.toFixed(digits) : '–';
}

const TOKEN_KEY = 'scg-admin-token';

/// Takes a token from the address's #token=... once, then drops it from the address.
function tokenFromFragment() {
  const m = /^#token=(.+)$/.exec(location.hash);
  if (!m) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  history.replaceState(null, '', location.pathname + location.search);
}

class AuthError extends Error {}

async function getJson(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = token ? { Authorization: 'Bearer ' + token } : {};
  const res = await fetch(path, { cache: 'no-store', headers });
  if (res.status === 401 || res.status === 403) {
    let why = 'HTTP ' + res.status;
    try { why = (await res.json()).error || why; } catch (e) { /* not JSON */ }
    throw new AuthError(why);
  }
  if (!res.ok) throw new Error(path + ': HTTP ' + res.status);
  return res.json();
}

function showLogin(message) {
  document.getElementById('login').hidden = !message;
  document.getElementById('login-why').textContent = message || '';
}

function setupLogin() {
  document.getElementById('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = document.getElementById('token');
    if (input.value.trim()) sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = '';
    tick(false);
  });
  document.getElementById('logout').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin('token forgotten: enter a token to see this replica');
  });
}

function renderCluster(c) {
  document.getElementById('node').textContent = c.node;
  document.getElementById('synced').textContent = c.synced ? 'yes' : 'no';
  document.getElementById('conflicts').textContent = String(c.conflicts);
  // A fixed set of class names, so the status text cannot pick a style.
  const statusClass = (s) => (s === 'down' ? 'bad' : 'good');
  fillTable('members', c.members.map((m) => [
    cell(m.name), cell(m.address), cell(m.status, statusClass(m.status)),
    cell(ms(m.last_seen_ms_ago)), cell(ms(m.replication_lag_ms)),
  ]));
}

function backendState(b) {
  if (b.removed) return 'removed';
  if (b.draining) return 'draining';
  return b.healthy ? 'healthy' : 'unhealthy';
}

const STATE_CLASS = { healthy: 'good', draining: 'warn', removed: 'muted', unhealthy: 'bad' };

function renderBackends(list) {
  fillTable('backends', list.map((b) => {
    const state = backendState(b);
    return [cell(b.name), cell(b.address), cell(state, STATE_CLASS[state]), cell(fixed(b.score, 3)),
      cell(b.utilization === null ? 'not polled' : fixed(b.utilization, 3)),
      cell(String(b.sessions)), cell(String(b.in_flight))];
  }));
}

function recordScores(list) {
  const seen = new Set();
  for (const b of list) {
    seen.add(b.name);
    if (!scoreHistory.has(b.name)) scoreHistory.set(b.name, []);
    const ring = scoreHistory.get(b.name);
    ring.push(b.score);
    if (ring.length > HISTORY) ring.shift();
  }
  for (const name of [...scoreHistory.keys()]) if (!seen.has(name)) scoreHistory.delete(name);
}

function drawChart() {
  const canvas = document.getElementById('scores');
  const ctx = canvas.getContext('2d');
  const w = canvas.width, h = canvas.height, pad = 30;
  ctx.clearRect(0, 0, w, h);
  let top = 1;
  for (const ring of scoreHistory.values()) for (const v of ring) top = Math.max(top, v);
  ctx.strokeStyle = '#ccc';
  ctx.fillStyle = '#666';
  ctx.font = '11px sans-serif';
  for (const f of [0, 0.5, 1]) {
    const y = h - pad / 2 - f * (h - pad);
    ctx.beginPath();
    ctx.moveTo(pad, y);
    ctx.lineTo(w, y);
    ctx.stroke();
    ctx.fillText((f * top).toFixed(1), 2, y + 4);
  }
  const x = (i) => pad + (i / (HISTORY - 1)) * (w - pad);
  const legend = [];
  let n = 0;
  for (const [name, ring] of scoreHistory) {
    const color = COLORS[n++ % COLORS.length];
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    const offset = HISTORY - ring.length;  // newest sample at the right edge
    ring.forEach((v, i) => {
      const y = h - pad / 2 - (v / top) * (h - pad);
      if (i === 0) ctx.moveTo(x(offset + i), y); else ctx.lineTo(x(offset + i), y);
    });
    ctx.stroke();
    if (ring.length > 0) {  // a dot on the newest sample: visible even before a line can be drawn
      const v = ring[ring.length - 1];
      ctx.fillStyle = color;
      ctx.beginPath();
      ctx.arc(x(HISTORY - 1), h - pad / 2 - (v / top) * (h - pad), 3, 0, 2 * Math.PI);
      ctx.fill();
    }
    const li = document.createElement('li');
    const swatch = document.createElement('span');
    swatch.className = 'swatch';
    swatch.style.background = color;
    li.append(swatch, document.createTextNode(name));
    legend.push(li);
  }
  document.getElementById('legend').replaceChildren(...legend);
}

function renderEvents(list) {
  const items = list.slice().reverse().map((e) => {
    const li = document.createElement('li');
    const time = document.createElement('time');
    time.textContent = new Date(e.time_ms).toLocaleTimeString();
    const kind = document.createElement('span');
    kind.className = 'kind';
    kind.textContent = e.kind;
    li.append(time, kind, document.createTextNode(e.text));
    return li;
  });
  if (items.length === 0) {
    const li = document.createElement('li');
    li.className = 'muted';
    li.textContent = 'none yet';
    items.push(li);
  }
  document.getElementById('events').replaceChildren(...items);
}

function showError(message) {
  const p = document.getElementById('error');
  p.textContent = message;
  p.hidden = !message;
}

async function tick(again = true) {
  try {
    const [cluster, backends, events] = await Promise.all([
      getJson('api/v1/cluster'), getJson('api/v1/backends'), getJson('api/v1/events')]);
    renderCluster(cluster);
    renderBackends(backends.backends);
    recordScores(backends.backends);
    drawChart();
    renderEvents(events.events);
    document.getElementById('updated').textContent = new Date().toLocaleTimeString();
    showError('');
    showLogin('');
  } catch (err) {
    if (err instanceof AuthError) {
      showError('');
      showLogin('admin token required: ' + err.message);
    } else {
      showError('cannot reach the admin API: ' + err.message);
    }
  } finally {
    if (again) setTimeout(tick, POLL_MS);
  }
}

tokenFromFragment();
setupLogin();
tick();
