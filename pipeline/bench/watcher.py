"""A viewer of the live page's video for the density bench (`--watched K`), in a process
of its own as a browser's would be: one socket per camera on `/api/live/<camera>` (the
tiles' sub-streams), everything sent read, until SIGTERM; then one JSON line on stdout
with the messages, bytes and frame records received and the sockets that ended after their
stream had started (each is opened again; one refused before its camera streams is not counted).

    python -m pipeline.bench.watcher PORT CAMERA [CAMERA ...]
"""
from __future__ import annotations

import asyncio
import json
import signal
import sys

import aiohttp

RETRY_S = 0.5  # a camera whose stream has not started yet is asked again


async def watch(session: aiohttp.ClientSession, url: str, counts: dict) -> None:
    while True:
        got = 0
        try:
            async with session.ws_connect(url, max_msg_size=0) as ws:
                async for m in ws:
                    got += 1
                    counts["messages"] += 1
                    if m.type == aiohttp.WSMsgType.BINARY:
                        counts["bytes"] += len(m.data)
                    elif m.type == aiohttp.WSMsgType.TEXT and '"type":"frame"' in m.data:
                        counts["records"] += 1
        except (aiohttp.ClientError, OSError):
            pass
        counts["ended"] += 1 if got > 1 else 0  # more than the `unavailable` of a camera not streaming yet
        await asyncio.sleep(RETRY_S)


async def main(port: int, cameras: list[str]) -> dict:
    counts = {"sockets": len(cameras), "messages": 0, "bytes": 0, "records": 0, "ended": 0}
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.ensure_future(watch(session, f"http://127.0.0.1:{port}/api/live/{cam}", counts))
                 for cam in cameras]
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return counts


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(int(sys.argv[1]), sys.argv[2:]))), flush=True)
