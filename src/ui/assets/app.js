// The history page: timeline, search, live and fleet views over /ui/api.
// Event content is hostile input: it is only ever set with textContent (or as the
// value of non-URL attributes); the timeline SVG is parsed as XML and imported, never
// assigned as HTML. The view is the URL: every change is written back with
// history.replaceState, and loading the URL restores it.

const VIEWS = ['timeline', 'search', 'live', 'fleet'];
const FORM_FIELDS = ['filter', 'since', 'until', 'pod'];
const LIVE_CAP = 500;
const PAGE_SIZE = 100;

const $ = (id) => document.getElementById(id);

const state = {
  view: 'timeline',
  params: new URLSearchParams(),
  // `after` of each search page shown so far; the last is the current page.
  pages: [0],
  next: null,
  live: null,
  liveCount: 0,
};

// ---- URL and form ---------------------------------------------------------

function readUrl() {
  const url = new URLSearchParams(window.location.search);
  const view = url.get('view');
  state.view = VIEWS.includes(view) ? view : 'timeline';
  for (const name of FORM_FIELDS) {
    $(name).value = url.get(name) || '';
  }
  // A long-running gateway's store starts long ago, and a picture draws its first
  // rows: without a range or a pod, open on the last hour, not on the oldest events.
  if (!url.get('since') && !url.get('until') && !url.get('pod')) $('since').value = '1h';
  const group = url.get('group');
  $('group').value = ['pod', 'namespace', 'node'].includes(group) ? group : 'pod';
  $('live-filter').value = url.get('filter') || '';
  if (state.view === 'fleet') $('fleet-since').value = url.get('since') || '24h';
  state.ns = url.get('ns') || '';
}

// The query parameters of the form (and `ns` from the URL), without empty ones.
function formParams() {
  const params = new URLSearchParams();
  for (const name of FORM_FIELDS) {
    const value = $(name).value.trim();
    if (value) params.set(name, value);
  }
  if (state.ns && $('pod').value.trim()) params.set('ns', state.ns);
  params.set('group', $('group').value);
  return params;
}

function writeUrl() {
  const url = new URLSearchParams();
  url.set('view', state.view);
  const params = formParams();
  if (state.view === 'live' || state.view === 'fleet') params.delete('group');
  if (state.view === 'live') {
    params.delete('filter');
    const live = $('live-filter').value.trim();
    if (live) params.set('filter', live);
  }
  if (state.view === 'fleet') {
    // The fleet's range is its own field: the URL carries that, and nothing else.
    url.set('since', $('fleet-since').value.trim() || '24h');
    history.replaceState(null, '', '/ui?' + url.toString());
    return;
  }
  for (const [name, value] of params) url.set(name, value);
  history.replaceState(null, '', '/ui?' + url.toString());
}

function storeParams(extra) {
  const params = formParams();
  params.delete('group');
  for (const [name, value] of Object.entries(extra || {})) params.set(name, value);
  return params;
}

// ---- Messages ---------------------------------------------------------------

function show(el, text) {
  el.textContent = text || '';
  el.hidden = !text;
}

function clearErrors() {
  show($('filter-error'), '');
  show($('message'), '');
}

// Shows an API error where it belongs: a filter's under the filter input.
function showError(error) {
  if (error.param === 'filter') {
    show($('filter-error'), error.error);
  } else {
    const name = error.param ? error.param + ': ' : '';
    show($('message'), name + error.error);
  }
}

class ApiError extends Error {
  constructor(body) {
    super(body.error);
    this.body = body;
  }
}

async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: 'application/json' } });
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new ApiError(body);
  return body;
}

async function getText(path) {
  const response = await fetch(path);
  if (!response.ok) {
    const body = await response.json().catch(() => ({ error: response.statusText }));
    throw new ApiError(body);
  }
  return response.text();
}

function report(error) {
  if (error instanceof ApiError) {
    showError(error.body);
  } else {
    show($('message'), String(error && error.message ? error.message : error));
  }
}

// ---- Formatting ---------------------------------------------------------------

function shortTime(text) {
  if (!text) return '';
  const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(\.\d{1,3})?/.exec(text);
  return m ? m[1] + ' ' + m[2] + (m[3] || '') : text;
}

function podOf(event) {
  const pod = event.pod || {};
  if (!pod.name) return '';
  return pod.namespace ? pod.namespace + '/' + pod.name : pod.name;
}

function containerOf(event) {
  const container = event.container || {};
  if (container.name) return container.name;
  const payload = event.event || {};
  const id = payload.container_id || payload.id || '';
  return typeof id === 'string' ? id.slice(0, 12) : '';
}

function summaryOf(event) {
  const payload = event.event;
  if (!payload || typeof payload !== 'object') return event.raw ? '(undecoded payload)' : '';
  const parts = [];
  if ('exit_status' in payload) parts.push('status ' + payload.exit_status);
  else if (event.topic === '/tasks/exit') parts.push('status 0');
  if (payload.pid) parts.push('pid ' + payload.pid);
  if (event.reason) parts.push(event.reason);
  if (parts.length) return parts.join(' · ');
  const text = JSON.stringify(payload);
  return text.length > 120 ? text.slice(0, 119) + '…' : text;
}

function cell(row, text, className) {
  const td = document.createElement('td');
  td.textContent = text == null ? '' : String(text);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

// ---- Detail -------------------------------------------------------------------

function showDetail(row, json) {
  $('detail-row').textContent = row ? 'row ' + row : '';
  $('detail-json').textContent = JSON.stringify(json, null, 2);
  $('detail').hidden = false;
}

async function fetchDetail(row) {
  if (!/^\d+$/.test(String(row))) return;
  try {
    showDetail(row, await getJson('/ui/api/event/' + row));
  } catch (error) {
    report(error);
  }
}

// ---- Timeline -----------------------------------------------------------------

// `15m`, `2h`, `7d`, `1w`, `30s` back from now, or an RFC 3339 time: milliseconds.
function parseTime(text, now) {
  const t = (text || '').trim();
  if (!t) return null;
  const m = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)$/.exec(t);
  if (m) {
    const unit = { ms: 1, s: 1e3, m: 6e4, h: 36e5, d: 864e5, w: 6048e5 }[m[2]];
    return now - Number(m[1]) * unit;
  }
  const parsed = Date.parse(t);
  return Number.isNaN(parsed) ? null : parsed;
}

// The range on screen: the drawn axis if there is one, else the form's.
function currentRange() {
  const svg = $('timeline').querySelector('svg');
  const from = svg ? Number(svg.getAttribute('data-from')) : NaN;
  const to = svg ? Number(svg.getAttribute('data-to')) : NaN;
  if (Number.isFinite(from) && Number.isFinite(to) && to > from) return [from, to];
  const now = Date.now();
  const until = parseTime($('until').value, now) ?? now;
  const since = parseTime($('since').value, now) ?? until - 36e5;
  return [since, Math.max(until, since + 1000)];
}

function setRange(from, to) {
  $('since').value = new Date(Math.round(from)).toISOString();
  $('until').value = new Date(Math.round(to)).toISOString();
  writeUrl();
  loadTimeline();
}

function zoom(factor) {
  const [from, to] = currentRange();
  const centre = (from + to) / 2;
  const half = ((to - from) * factor) / 2;
  setRange(centre - half, centre + half);
}

function pan(direction) {
  const [from, to] = currentRange();
  const step = ((to - from) / 2) * direction;
  setRange(from + step, to + step);
}

async function loadTimeline() {
  const params = formParams();
  $('timeline-download').href = '/ui/api/timeline.html?' + params.toString();
  const box = $('timeline');
  box.classList.add('loading');
  try {
    const text = await getText('/ui/api/timeline.svg?' + params.toString());
    const doc = new DOMParser().parseFromString(text, 'image/svg+xml');
    const root = doc.documentElement;
    if (!root || root.nodeName !== 'svg' || doc.getElementsByTagName('parsererror').length) {
      throw new Error('the timeline could not be read');
    }
    const svg = document.importNode(root, true);
    for (const mark of svg.querySelectorAll('.mark')) {
      mark.addEventListener('click', () => fetchDetail(mark.getAttribute('data-row')));
    }
    box.replaceChildren(svg);
    const from = Number(svg.getAttribute('data-from'));
    const to = Number(svg.getAttribute('data-to'));
    $('range').textContent = Number.isFinite(from) && Number.isFinite(to)
      ? shortTime(new Date(from).toISOString()) + ' – ' + shortTime(new Date(to).toISOString()) + ' UTC'
      : '';
  } catch (error) {
    box.replaceChildren();
    $('range').textContent = '';
    report(error);
  } finally {
    box.classList.remove('loading');
  }
}

// ---- Search -------------------------------------------------------------------

function exportLinks() {
  const params = storeParams();
  for (const format of ['jsonl', 'csv']) {
    const link = new URLSearchParams(params);
    link.set('format', format);
    $('export-' + format).href = '/ui/api/export?' + link.toString();
  }
}

async function loadSearch() {
  exportLinks();
  const after = state.pages[state.pages.length - 1];
  const params = storeParams({ limit: String(PAGE_SIZE) });
  if (after > 0) params.set('after', String(after));
  const tbody = $('results').tBodies[0];
  try {
    const page = await getJson('/ui/api/events?' + params.toString());
    const rows = page.events.map(({ row, event }) => {
      const tr = document.createElement('tr');
      tr.className = 'event-row';
      tr.setAttribute('data-row', String(row));
      cell(tr, shortTime(event.timestamp), 'time');
      cell(tr, event.node);
      cell(tr, event.namespace);
      cell(tr, event.topic, 'topic');
      cell(tr, podOf(event));
      cell(tr, containerOf(event));
      cell(tr, event.origin, 'origin-' + (event.origin === 'reconciled' ? 'reconciled' : 'live'));
      cell(tr, summaryOf(event), 'summary');
      tr.addEventListener('click', () => showDetail(row, event));
      return tr;
    });
    tbody.replaceChildren(...rows);
    state.next = page.next;
    $('next-page').disabled = page.next == null;
    $('prev-page').disabled = state.pages.length < 2;
    const first = (state.pages.length - 1) * PAGE_SIZE;
    $('page-info').textContent = rows.length
      ? 'events ' + (first + 1) + '–' + (first + rows.length) + (page.next == null ? '' : ' and more')
      : 'no events match';
  } catch (error) {
    tbody.replaceChildren();
    $('next-page').disabled = true;
    $('page-info').textContent = '';
    report(error);
  }
}

// ---- Live ---------------------------------------------------------------------

function setLiveStatus(text) {
  const status = $('live-status');
  status.textContent = text;
  status.className = 'status ' + (text === 'connected' ? 'status-ok' : 'status-off');
}

function stopLive() {
  if (state.live) state.live.close();
  state.live = null;
  setLiveStatus('disconnected');
}

function startLive() {
  stopLive();
  show($('live-error'), '');
  const filter = $('live-filter').value.trim();
  const url = '/ui/api/live' + (filter ? '?filter=' + encodeURIComponent(filter) : '');
  const source = new EventSource(url);
  state.live = source;
  source.onopen = () => setLiveStatus('connected');
  source.onerror = () => {
    setLiveStatus('disconnected');
    // A refused stream (a bad filter, too many pages) is closed for good: ask why.
    if (source.readyState === EventSource.CLOSED && state.live === source) explainLive(url);
  };
  source.onmessage = (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    addLive(event);
  };
  // After a reconnect the gateway sends what the page missed; what it no longer
  // holds it names, so the list never looks whole when it is not.
  source.addEventListener('missed', (message) => {
    let missed;
    try {
      missed = JSON.parse(message.data);
    } catch {
      return;
    }
    const li = document.createElement('li');
    li.className = 'live-missed';
    li.textContent = 'Not shown after the reconnect: events ' + missed.from_seq + ' to ' +
      missed.to_seq + ' (' + missed.why + ').';
    $('live-events').prepend(li);
  });
}

async function explainLive(url) {
  const abort = new AbortController();
  try {
    const response = await fetch(url, { signal: abort.signal });
    if (!response.ok) {
      const body = await response.json().catch(() => ({ error: response.statusText }));
      show($('live-error'), body.error);
    }
  } catch {
    // The gateway is gone; the status says so.
  } finally {
    abort.abort();
  }
}

function addLive(event) {
  const list = $('live-events');
  const li = document.createElement('li');
  li.className = 'live-event' + (event.origin === 'reconciled' ? ' reconciled' : '');
  li.setAttribute('data-id', String(event.id || ''));
  const parts = [
    ['time', shortTime(event.timestamp)],
    ['node', event.node || ''],
    ['namespace', event.namespace],
    ['topic', event.topic],
    ['pod', podOf(event)],
    ['container', containerOf(event)],
    ['summary', summaryOf(event)],
  ];
  for (const [name, text] of parts) {
    const span = document.createElement('span');
    span.className = 'live-' + name;
    span.textContent = text == null ? '' : String(text);
    li.appendChild(span);
  }
  li.addEventListener('click', () => showDetail(null, event));
  list.prepend(li);
  while (list.children.length > LIVE_CAP) list.lastElementChild.remove();
  state.liveCount += 1;
  $('live-count').textContent = state.liveCount + ' received';
}

// ---- Fleet --------------------------------------------------------------------

function ago(text) {
  const t = Date.parse(text || '');
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, (Date.now() - t) / 1000);
  if (s < 90) return Math.round(s) + ' s ago';
  if (s < 5400) return Math.round(s / 60) + ' min ago';
  if (s < 172800) return Math.round(s / 3600) + ' h ago';
  return Math.round(s / 86400) + ' d ago';
}

function duration(seconds) {
  if (!seconds) return '0 s';
  if (seconds < 120) return seconds.toFixed(1) + ' s';
  if (seconds < 7200) return (seconds / 60).toFixed(1) + ' min';
  return (seconds / 3600).toFixed(1) + ' h';
}

async function loadFleet() {
  const since = $('fleet-since').value.trim() || '24h';
  const tbody = $('fleet').tBodies[0];
  try {
    const fleet = await getJson('/ui/api/fleet?since=' + encodeURIComponent(since));
    const rows = fleet.nodes.map((node) => {
      const tr = document.createElement('tr');
      tr.className = 'node-row';
      tr.setAttribute('data-node', node.node);
      cell(tr, node.node || '(unknown)', 'node');
      const last = cell(tr, node.last_event ? ago(node.last_event) : 'none');
      if (node.last_event) last.setAttribute('title', node.last_event);
      cell(tr, node.events, 'num');
      cell(tr, Number(node.events_per_hour).toFixed(1), 'num');
      cell(tr, node.gaps, 'num' + (node.gaps ? ' warn' : ''));
      cell(tr, duration(node.gap_seconds), 'num');
      return tr;
    });
    tbody.replaceChildren(...rows);
    if (!rows.length) show($('message'), 'no events in that time');
  } catch (error) {
    tbody.replaceChildren();
    report(error);
  }
}

// ---- Views --------------------------------------------------------------------

function setView(view) {
  state.view = view;
  for (const name of VIEWS) {
    $('view-' + name).hidden = name !== view;
    const tab = $('tab-' + name);
    tab.classList.toggle('active', name === view);
    if (name === view) tab.setAttribute('aria-current', 'page');
    else tab.removeAttribute('aria-current');
  }
  $('query').hidden = !(view === 'timeline' || view === 'search');
  $('group').parentElement.hidden = view !== 'timeline';
  $('detail').hidden = true;
  clearErrors();
  if (view !== 'live') stopLive();
  writeUrl();
  load();
}

function load() {
  clearErrors();
  if (state.view === 'timeline') loadTimeline();
  else if (state.view === 'search') loadSearch();
  else if (state.view === 'live') startLive();
  else loadFleet();
}

function init() {
  readUrl();
  for (const name of VIEWS) {
    $('tab-' + name).addEventListener('click', (e) => {
      e.preventDefault();
      setView(name);
    });
  }
  $('query').addEventListener('submit', (e) => {
    e.preventDefault();
    state.pages = [0];
    writeUrl();
    load();
  });
  $('live-form').addEventListener('submit', (e) => {
    e.preventDefault();
    state.liveCount = 0;
    $('live-events').replaceChildren();
    $('live-count').textContent = '';
    writeUrl();
    startLive();
  });
  $('fleet-form').addEventListener('submit', (e) => {
    e.preventDefault();
    clearErrors();
    writeUrl();
    loadFleet();
  });
  $('zoom-in').addEventListener('click', () => zoom(0.5));
  $('zoom-out').addEventListener('click', () => zoom(2));
  $('pan-left').addEventListener('click', () => pan(-1));
  $('pan-right').addEventListener('click', () => pan(1));
  $('next-page').addEventListener('click', () => {
    if (state.next == null) return;
    state.pages.push(state.next);
    loadSearch();
  });
  $('prev-page').addEventListener('click', () => {
    if (state.pages.length < 2) return;
    state.pages.pop();
    loadSearch();
  });
  $('detail-close').addEventListener('click', () => {
    $('detail').hidden = true;
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') $('detail').hidden = true;
  });
  setView(state.view);
}

init();
