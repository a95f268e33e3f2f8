"use strict";
// Recording playback, shared by the live page (/) and the review page (/review), served
// as /static/playback.js: a recording (/recordings/<path>) plays in a <video> with the
// boxes of the JSON lines rows that point into it (/api/boxes) drawn on a <canvas> over
// it, each row with the picture whose time it names (the rows come a minute at a time).
// A page may hold several players at once (the review page plays every camera at a moment).
// Names from the config are only ever drawn or set as text.

const pathUrl = (base, path) => base + path.split("/").map(encodeURIComponent).join("/");

function classColor(id) {  // as pipeline/drawing.py colours classes
  const h = (id * 0.618033988749895) % 1, s = 0.85, v = 0.95, i = Math.floor(h * 6), f = h * 6 - i;
  const p = v * (1 - s), q = v * (1 - f * s), u = v * (1 - (1 - f) * s);
  const [r, g, b] = [[v, u, p], [q, v, p], [p, v, u], [p, q, v], [u, p, v], [v, p, q]][i % 6];
  return `rgb(${r * 255 | 0},${g * 255 | 0},${b * 255 | 0})`;
}

// One player over `video` and `canvas`: its state (`file`, the `frames` of boxes loaded for
// `from`..`to`, how many boxes it `drawn` last and the row `shown`), `open(file, at, track)`
// and `stop()`. A `track` given is drawn thicker than the other boxes.
function makePlayer(video, canvas) {
  const player = {file: null, frames: [], from: 0, to: -1, loading: false, drawn: 0, shown: null, track: null,
                  video, canvas};
  player.open = (file, at, track) => openRecording(player, file, at, track);
  player.stop = () => { video.pause(); player.file = null; };
  return player;
}

async function loadBoxes(player, file, t) {
  if (player.loading) return;
  player.loading = true;
  const from = Math.max(0, t - 5), to = t + 60;
  try {
    const r = await fetch(`api/boxes?recording=${encodeURIComponent(file)}&from=${from}&to=${to}`, {cache: "no-store"});
    if (r.ok && player.file === file) Object.assign(player, {frames: (await r.json()).frames, from, to});
  } finally {
    player.loading = false;
  }
}

function nearestFrame(player, t) {
  const f = player.frames;
  if (!f.length) return null;
  let lo = 0, hi = f.length - 1;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (f[mid].t < t) lo = mid + 1; else hi = mid; }
  const best = lo > 0 && t - f[lo - 1].t < f[lo].t - t ? f[lo - 1] : f[lo];
  const step = f.length > 1 ? (f[f.length - 1].t - f[0].t) / (f.length - 1) : 0.1;
  return Math.abs(best.t - t) <= Math.max(0.02, step / 2) ? best : null;  // no row for this picture: nothing drawn
}

function drawBoxes(player, t) {
  const {video, canvas} = player;
  const w = video.clientWidth, h = video.clientHeight, dpr = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    canvas.style.width = w + "px"; canvas.style.height = h + "px";
  }
  const g = canvas.getContext("2d");
  g.setTransform(1, 0, 0, 1, 0, 0);
  g.clearRect(0, 0, canvas.width, canvas.height);
  const frame = nearestFrame(player, t);
  player.shown = frame ? frame.seq : null;
  player.drawn = 0;
  if (!frame || !video.videoWidth) return;
  const k = Math.min(w / video.videoWidth, h / video.videoHeight);  // the picture as the element fits it
  g.setTransform(dpr * k, 0, 0, dpr * k, dpr * (w - video.videoWidth * k) / 2, dpr * (h - video.videoHeight * k) / 2);
  g.font = `${Math.max(10, 13 / k)}px system-ui, sans-serif`;
  for (const d of frame.detections) {
    const [x1, y1, x2, y2] = d.box, color = classColor(d.class_id);
    g.lineWidth = Math.max(1, (player.track != null && d.track === player.track ? 4 : 2) / k);
    g.strokeStyle = color; g.strokeRect(x1, y1, x2 - x1, y2 - y1);
    const text = `${d.track != null ? "#" + d.track + " " : ""}${d.class} ${d.score.toFixed(2)}`;
    const tw = g.measureText(text).width + 6 / k, th = 16 / k;
    g.fillStyle = color; g.fillRect(x1, Math.max(0, y1 - th), tw, th);
    g.fillStyle = "#000"; g.fillText(text, x1 + 3 / k, Math.max(0, y1 - th) + th - 4 / k);
    player.drawn++;
  }
}

// Plays `file` from `at` seconds in (its own clock), the boxes following the picture shown.
function openRecording(player, file, at, track) {
  const {video} = player;
  Object.assign(player, {file, frames: [], from: 0, to: -1, drawn: 0, shown: null, track: track ?? null});
  const onFrame = (now, meta) => {
    if (player.file !== file) return;
    const t = meta ? meta.mediaTime : video.currentTime;
    if (t < player.from || t > player.to - 10) loadBoxes(player, file, t);
    drawBoxes(player, t);
    if (video.requestVideoFrameCallback) video.requestVideoFrameCallback(onFrame);
  };
  video.onseeked = () => drawBoxes(player, video.currentTime);
  video.onloadedmetadata = () => { if (at) video.currentTime = at; };
  loadBoxes(player, file, at).then(() => drawBoxes(player, video.currentTime));
  video.src = pathUrl("recordings/", file);
  if (video.requestVideoFrameCallback) video.requestVideoFrameCallback(onFrame);
  else video.ontimeupdate = () => onFrame(0, null);
  video.play().catch(() => {});
}
