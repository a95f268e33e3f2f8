"use strict";
// The boxes over a <video>, one code for the live tiles (page.html) and every recording
// played on a page (playback.js), served as /static/overlay.js. A frame's record (its
// detections, and where the live socket sends them its lines, zones and counts) is drawn
// for the picture the video presents: `requestVideoFrameCallback` names that picture's
// media time, and the record whose `t` is nearest to it within half a frame interval is
// the picture's own (a wall-clock guess would draw the boxes of a picture shown earlier or
// later). The canvas is laid exactly over the picture's area inside the element (a
// <video> letterboxes its picture: object-fit contain), so nothing drawn reaches past the
// picture into the element's bars or what lies under it. Names are only ever drawn as text.

function classColor(id) {  // as pipeline/drawing.py colours classes
  const h = (id * 0.618033988749895) % 1, s = 0.85, v = 0.95, i = Math.floor(h * 6), f = h * 6 - i;
  const p = v * (1 - s), q = v * (1 - f * s), u = v * (1 - (1 - f) * s);
  const [r, g, b] = [[v, u, p], [q, v, p], [p, v, u], [p, q, v], [u, p, v], [v, p, q]][i % 6];
  return `rgb(${r * 255 | 0},${g * 255 | 0},${b * 255 | 0})`;
}
const LINE_COLOR = "rgb(255,220,0)", ZONE_COLOR = "rgb(0,200,255)";  // drawing.py's LINE_COLOR, ZONE_COLOR
const textOn = (rgb) => {  // drawing.py's text_color: dark text on a light label
  const [r, g, b] = rgb.match(/\d+/g).map(Number);
  return 0.299 * r + 0.587 * g + 0.114 * b > 140 ? "#000" : "#fff";
};

// The picture's area inside `video`, in CSS pixels from its offset parent (null: no picture yet).
function pictureArea(video) {
  const vw = video.videoWidth, vh = video.videoHeight, w = video.clientWidth, h = video.clientHeight;
  if (!vw || !vh || !w || !h) return null;
  const k = Math.min(w / vw, h / vh), width = vw * k, height = vh * k;
  return {left: video.offsetLeft + video.clientLeft + (w - width) / 2,
          top: video.offsetTop + video.clientTop + (h - height) / 2, width, height};
}

// `canvas` laid over the picture's area and cleared; the area (null: hidden, no picture).
function fitCanvas(canvas, video) {
  const area = pictureArea(video), dpr = window.devicePixelRatio || 1;
  canvas.hidden = !area;
  if (!area) return null;
  const w = Math.round(area.width * dpr), h = Math.round(area.height * dpr);
  if (canvas.width !== w || canvas.height !== h) { canvas.width = w; canvas.height = h; }
  const place = `${area.left},${area.top},${area.width},${area.height}`;
  if (canvas.dataset.place !== place) {  // set only when moved: a style set restyles the page, per picture
    canvas.dataset.place = place;
    Object.assign(canvas.style, {position: "absolute", left: area.left + "px", top: area.top + "px",
                                 width: area.width + "px", height: area.height + "px"});
  }
  const g = canvas.getContext("2d");
  g.setTransform(1, 0, 0, 1, 0, 0);
  g.clearRect(0, 0, w, h);
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  return area;
}

// Entries of a record's `lines` or `zones`: a list of objects with `name`, or an object by name.
const named = (v) => Array.isArray(v) ? v : Object.entries(v || {}).map(([name, x]) => ({name, ...x}));

function drawAnalytics(g, record, sx, sy) {
  g.lineWidth = 2; g.font = "12px system-ui, sans-serif";
  for (const z of named(record.zones)) {
    const points = z.polygon || z.points || [];
    if (!points.length) continue;
    g.strokeStyle = g.fillStyle = ZONE_COLOR; g.beginPath();
    points.forEach(([x, y], i) => i ? g.lineTo(x * sx, y * sy) : g.moveTo(x * sx, y * sy));
    g.closePath(); g.stroke();
    const still = z.stationary ? `, ${z.stationary} stationary` : "";
    g.fillText(`${z.name}: ${z.inside ?? 0} inside${still}`, points[0][0] * sx + 4, points[0][1] * sy + 16);
  }
  for (const l of named(record.lines)) {
    const [a, b] = l.points || [l.a, l.b];
    if (!a || !b) continue;
    g.strokeStyle = g.fillStyle = LINE_COLOR; g.beginPath();
    g.moveTo(a[0] * sx, a[1] * sy); g.lineTo(b[0] * sx, b[1] * sy); g.stroke();
    g.fillText(`${l.name}: in ${l.in ?? l.into ?? 0} out ${l.out ?? 0}`, a[0] * sx + 4, Math.max(12, a[1] * sy - 6));
  }
}

function labelLines(d) {
  const head = `${d.track != null ? "#" + d.track + " " : ""}${d.class} ${Number(d.score).toFixed(2)}` +
    (d.stationary ? " still" : "");
  return [head, ...Object.entries(d.labels || {}).map(([stage, x]) => `${stage}: ${x.label} ${Number(x.score).toFixed(2)}`)];
}

// Where a label of `w` x `h` goes for a box: above it, else inside its top, else below it,
// the first place inside the picture no earlier label covers (drawing.py's place_label).
function placeLabel([x1, y1, , y2], w, h, area, taken) {
  const x = Math.max(0, Math.min(x1, area.width - w));
  const free = (y) => y >= 0 && y + h <= area.height &&
    !taken.some((t) => x < t[2] && t[0] < x + w && y < t[3] && t[1] < y + h);
  const y = [y1 - h, y1, y2].find(free) ?? Math.min(Math.max(0, y1 - h), Math.max(0, area.height - h));
  return [x, y, x + w, y + h];
}

// `record` drawn over `video` on `canvas`, its boxes in the pixels the record names (a live
// record's `boxes`: a sub-stream's boxes are in its main stream's pixels), else in `space`
// ([w, h]), else the video's own; `track`: one drawn thicker. The number of boxes drawn.
function drawRecord(canvas, video, record, space, track) {
  const blank = !record || !((record.detections || []).length || named(record.zones).length ||
                             named(record.lines).length);
  if (blank && canvas.dataset.blank === "1") return 0;  // still blank: untouched, nothing for the page to repaint
  const area = fitCanvas(canvas, video);
  if (canvas.dataset.blank !== (blank ? "1" : "")) canvas.dataset.blank = blank ? "1" : "";
  if (!area || !record) return 0;
  const [bw, bh] = record.boxes || space || record.pixels || [video.videoWidth, video.videoHeight];
  const sx = area.width / bw, sy = area.height / bh, g = canvas.getContext("2d"), taken = [];
  drawAnalytics(g, record, sx, sy);
  g.font = "12px system-ui, sans-serif";
  const dets = record.detections || [], order = [...dets].sort((a, b) => b.score - a.score);  // the surest get the best places
  for (const d of order) {
    const box = [d.box[0] * sx, d.box[1] * sy, d.box[2] * sx, d.box[3] * sy], color = classColor(d.class_id);
    g.lineWidth = track != null && d.track === track ? 4 : d.predicted ? 1 : 2;
    g.strokeStyle = color; g.strokeRect(box[0], box[1], box[2] - box[0], box[3] - box[1]);
    const lines = labelLines(d), w = Math.max(...lines.map((t) => g.measureText(t).width)) + 6;
    const [x, y] = placeLabel(box, w, 15 * lines.length, area, taken);
    taken.push([x, y, x + w, y + 15 * lines.length]);
    g.fillStyle = color; g.fillRect(x, y, w, 15 * lines.length);
    g.fillStyle = textOn(color);
    lines.forEach((t, k) => g.fillText(t, x + 3, y + 12 + 15 * k));
  }
  return dets.length;
}

// Of `records` (sorted by `t`), the one nearest `t` within `half` (none: null).
function nearestRecord(records, t, half) {
  if (!records.length) return null;
  let lo = 0, hi = records.length - 1;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (records[mid].t < t) lo = mid + 1; else hi = mid; }
  const best = lo > 0 && t - records[lo - 1].t < records[lo].t - t ? records[lo - 1] : records[lo];
  return Math.abs(best.t - t) <= half ? best : null;
}

const KEEP_LOG = 5000, KEEP_LATENCY = 600;
// A picture between two analysed frames (a camera analysed at `max_fps`, a gated one) has
// no record of its own: the last analysed frame's boxes stay on it while it is at most 1.5
// analysis intervals old (its media time says so, never the wall clock), counted `held`.
const MAX_HOLD_S = 1.0;

// The newest record at or before media time `t`, at most `hold` seconds before it (null: none).
function heldRecord(records, t, hold) {
  for (let i = records.length - 1; i >= 0; i--) {
    if (records[i].t <= t) return t - records[i].t <= hold ? records[i] : null;
  }
  return null;
}

// An overlay over a live `video`: records added as they come (`add`), each presented picture
// drawn with its own (`start`). Its counters: pictures `presented` (the callbacks; `missed`:
// pictures presented between two of them), `withBoxes` (their own record), `held` (the last
// analysed frame's, MAX_HOLD_S), `withoutBoxes`, `latency` (capture to
// presentation, seconds, the newest KEEP_LATENCY); `log`: [media time, seq drawn or null].
function makeOverlay(video, canvas) {
  const o = {records: [], space: null, step: 0.1, running: 0, presented: 0, missed: 0, withBoxes: 0,
             withoutBoxes: 0, held: 0, hold: 0, latency: [], log: [], last: -1};
  o.add = (record) => {
    const r = o.records;
    if (r.length && record.t > r[r.length - 1].t) o.hold = Math.min(MAX_HOLD_S, 1.5 * (record.t - r[r.length - 1].t));
    if (r.length && record.t < r[r.length - 1].t) { r.splice(r.findIndex((x) => x.t > record.t), 0, record); }
    else r.push(record);
    const behind = video.currentTime - 5;  // kept a few seconds behind the picture shown, a bounded number
    let old = 0;
    while (old < r.length && (r[old].t < behind || r.length - old > 2000)) old++;
    if (old) r.splice(0, old);
  };
  o.clear = () => { o.records = []; o.last = -1; drawRecord(canvas, video, null); };
  o.stop = () => { o.running++; };
  o.start = () => {
    const run = ++o.running;
    const onFrame = (now, meta) => {
      if (run !== o.running) return;
      presented(o, video, canvas, meta);
      video.requestVideoFrameCallback(onFrame);
    };
    if (video.requestVideoFrameCallback) video.requestVideoFrameCallback(onFrame);
  };
  o.stats = () => overlayStats(o);
  return o;
}

function presented(o, video, canvas, meta) {
  if (o.last >= 0 && meta.presentedFrames > o.last + 1) o.missed += meta.presentedFrames - o.last - 1;
  o.last = meta.presentedFrames;
  o.presented++;
  const record = nearestRecord(o.records, meta.mediaTime, o.step / 2);
  const held = record ? null : heldRecord(o.records, meta.mediaTime, o.hold);
  drawRecord(canvas, video, record || held, o.space);
  if (record) o.withBoxes++; else if (held) o.held++; else o.withoutBoxes++;
  o.log.push([meta.mediaTime, record ? record.seq : null]);
  if (o.log.length > KEEP_LOG) o.log.splice(0, o.log.length - KEEP_LOG);
  if (record && record.captured) {  // when the picture was read (wall clock, epoch seconds)
    o.latency.push((performance.timeOrigin + meta.expectedDisplayTime) / 1000 - record.captured);
    if (o.latency.length > KEEP_LATENCY) o.latency.shift();
  }
}

// The share of pictures shown with their boxes and the latency's median and P95 (seconds).
function overlayStats(o) {
  const sorted = [...o.latency].sort((a, b) => a - b), at = (q) => sorted[Math.min(sorted.length - 1,
                                                                                   Math.floor(q * sorted.length))];
  return {presented: o.presented, missed: o.missed, withBoxes: o.withBoxes, withoutBoxes: o.withoutBoxes,
          held: o.held, boxed: o.presented ? o.withBoxes / o.presented : null,
          heldShare: o.presented ? o.held / o.presented : null,
          median: sorted.length ? at(0.5) : null, p95: sorted.length ? at(0.95) : null};
}
