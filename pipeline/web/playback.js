"use strict";
// Recording playback, shared by the live page (/) and the review page (/review), served
// as /static/playback.js: a recording (/recordings/<path>) plays in a <video> with the
// boxes of the JSON lines rows that point into it (/api/boxes) drawn on a <canvas> over
// it, each row with the picture whose time it names (the rows come a minute at a time).
// A recording still being written is followed as it grows (`follow`).
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
// `from`..`to`, how many boxes it `drawn` last and the row `shown`, the `bytes` served when
// it opened), `open(file, at, track)` and `stop()`. A `track` given is drawn thicker than
// the other boxes.
function makePlayer(video, canvas) {
  const player = {file: null, frames: [], from: 0, to: -1, loading: false, asked: 0, drawn: 0, shown: null,
                  track: null, at: 0, bytes: 0, opened: 0, following: 0, video, canvas};
  player.open = (file, at, track) => openRecording(player, file, at, track);
  player.stop = () => { video.pause(); player.file = null; player.opened++; };  // its loops end
  return player;
}

async function loadBoxes(player, file, t) {
  if (player.loading) return;
  player.loading = true;
  player.asked = Date.now();
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

// How long a player at the end of a recording waits for it to grow before taking it as finished.
const FOLLOW_S = 30;

// The bytes of `file` the server plays now (up to its last whole fragment; 0 while none is).
async function servedBytes(file) {
  try {
    const r = await fetch(pathUrl("recordings/", file), {headers: {Range: "bytes=0-0"}, cache: "no-store"});
    const m = /\/(\d+)$/.exec(r.headers.get("Content-Range") || "");
    return m ? Number(m[1]) : 0;
  } catch (e) {
    return 0;  // the server away: as if nothing grew
  }
}

// A recording still being written is served as far as it is whole when asked, so a player
// that reached the end of it (or opened it before anything was whole) asks once a second
// whether it has grown, and when it has opens it again where it stood, its boxes fetched
// anew; until it has not grown for FOLLOW_S, or the player moved on.
async function follow(player, file, opened) {
  if (player.following === opened) return;  // one loop per opening
  player.following = opened;
  const {video} = player, since = Date.now();
  try {
    while (player.opened === opened && (video.ended || video.error) && Date.now() - since < FOLLOW_S * 1000) {
      const bytes = await servedBytes(file);
      if (player.opened !== opened) return;
      if (bytes > player.bytes) {
        openRecording(player, file, video.error ? player.at : video.currentTime, player.track, bytes);
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  } finally {
    if (player.following === opened) player.following = 0;
  }
}

// Plays `file` from `at` seconds in (its own clock), the boxes following the picture shown;
// `bytes`: what the server served of it when it was last asked (a recording followed as it grows).
async function openRecording(player, file, at, track, bytes) {
  const {video} = player, opened = player.opened + 1;
  Object.assign(player, {file, frames: [], from: 0, to: -1, drawn: 0, shown: null, track: track ?? null, at,
                         opened, bytes: bytes ?? 0});
  if (bytes == null) {  // asked before the video asks: what it loads is at least this much
    player.bytes = await servedBytes(file);
    if (player.opened !== opened) return;
  }
  const onFrame = (now, meta) => {
    if (player.opened !== opened) return;
    const t = meta ? meta.mediaTime : video.currentTime, f = player.frames;
    const beyond = !f.length || t > f[f.length - 1].t;  // rows come after their pictures: asked again
    if (t < player.from || t > player.to - 10 || (beyond && Date.now() - player.asked > 1000)) {
      loadBoxes(player, file, t);
    }
    drawBoxes(player, t);
    if (video.requestVideoFrameCallback) video.requestVideoFrameCallback(onFrame);
  };
  video.onseeked = () => drawBoxes(player, video.currentTime);
  video.onloadedmetadata = () => { if (at) video.currentTime = at; };
  video.onended = video.onerror = () => follow(player, file, opened);
  loadBoxes(player, file, at).then(() => drawBoxes(player, video.currentTime));
  video.src = pathUrl("recordings/", file) + (bytes == null ? "" : `?served=${bytes}`);
  if (video.requestVideoFrameCallback) video.requestVideoFrameCallback(onFrame);
  else video.ontimeupdate = () => onFrame(0, null);
  video.play().catch(() => {});
}
