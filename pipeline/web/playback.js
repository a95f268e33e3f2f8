"use strict";
// Recording playback, shared by the live page (/) and the review page (/review), served
// as /static/playback.js: a recording (/recordings/<path>) plays in a <video> with the
// boxes of the JSON lines rows that point into it (/api/boxes) drawn by the live tiles'
// overlay (/static/overlay.js, loaded first) on a <canvas> laid over its picture, each row
// with the picture whose media time it names (the rows come a minute at a time).
// A recording still being written is followed as it grows (`follow`).
// A page may hold several players at once (the review page plays every camera at a moment).
// Names from the config are only ever drawn or set as text.

const pathUrl = (base, path) => base + path.split("/").map(encodeURIComponent).join("/");

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
  const f = player.frames, step = f.length > 1 ? (f[f.length - 1].t - f[0].t) / (f.length - 1) : 0.1;
  return nearestRecord(f, t, Math.max(0.02, step / 2));  // no row for this picture: nothing drawn
}

function drawBoxes(player, t) {
  const frame = nearestFrame(player, t);
  player.shown = frame ? frame.seq : null;
  player.drawn = drawRecord(player.canvas, player.video, frame, null, player.track);
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
