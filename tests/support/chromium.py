"""Headless Chromium for the tests and the scripts that measure the page: Debian's
chromium and chromedriver (installed by .ci/run), one set of options."""
from __future__ import annotations

import shutil

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def chromium(width: int, height: int):
    """A headless Chromium of `width` x `height` and its chromedriver service (its process
    is the browser's parent: the scripts read the browser's CPU under it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--autoplay-policy=no-user-gesture-required", f"--window-size={width},{height}"):
        opts.add_argument(arg)
    opts.binary_location = CHROMIUM
    service = Service(CHROMEDRIVER)
    return webdriver.Chrome(service=service, options=opts), service
