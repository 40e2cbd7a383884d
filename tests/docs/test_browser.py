"""The built site in headless Chromium: home renders, navigation reaches a runbook, search works, Mermaid is SVG."""

import functools
import http.server
import os
import re
import shutil
import tempfile
import threading
import urllib.request
from pathlib import Path

import pytest

from .test_site import build

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "reports" / "screenshots"
SITE: dict = {}  # the served site's folder

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("chromedriver")),
                                 reason="apt-get install chromium chromium-driver"),
              pytest.mark.skipif(not (ROOT / "docs/assets/vendor/mermaid.min.js").exists(), reason="run ./setup")]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    build("cluster.yaml", site)  # in this process, as `invoke docs --cluster cluster.yaml --out SITE` builds it
    SITE["path"] = site
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not look for drivers online
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tempfile.mkdtemp()}", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(shutil.which("chromedriver")))
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


def test_site_in_a_real_browser(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.get(served + "/")
    assert "beefcake2" in browser.title
    assert browser.find_element(By.CSS_SELECTOR, "article h1").text == "beefcake2"
    browser.save_screenshot(str(ARTIFACTS / "home.png"))

    # navigation is grouped (Deploy / Operate / Troubleshoot / Reference) and reaches a runbook page
    groups = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".md-sidebar--primary .md-nav__item--section > "
                                                                     ".md-nav__link")]
    assert groups[:4] == ["Deploy", "Operate", "Troubleshoot", "Reference"], groups
    browser.find_element(By.XPATH, "//label[contains(@class, 'md-nav__link') and contains(., 'Deploy runbooks')]"
                         ).click()
    link = browser.find_element(By.PARTIAL_LINK_TEXT, "Deploy the reasoning tier")
    link.click()
    WebDriverWait(browser, 10).until(ec.url_contains("/runbooks/deploy-slurm-reasoning/"))  # beefcake2: SLURM
    assert "clusterbook-jobs submit reasoning" in browser.find_element(By.TAG_NAME, "article").text

    # the built-in search finds llama-rpc
    browser.find_element(By.CSS_SELECTOR, "label.md-search__icon, .md-search__input").click()
    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    box.send_keys("llama-rpc")
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item"))
    assert len(browser.find_elements(By.CSS_SELECTOR, ".md-search-result__item")) > 0
    browser.save_screenshot(str(ARTIFACTS / "search.png"))

    # the architecture diagram renders as SVG (Material draws it inside a shadow root)
    browser.get(served + "/architecture/")
    host = WebDriverWait(browser, 15).until(lambda d: d.find_element(By.CSS_SELECTOR, "div.mermaid"))
    svg = WebDriverWait(browser, 15).until(lambda d: host.shadow_root.find_elements(By.CSS_SELECTOR, "svg"))
    assert svg
    browser.save_screenshot(str(ARTIFACTS / "architecture.png"))


def test_api_tabs_admonitions_and_pictures_in_a_real_browser(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.get(served + "/api/")
    tabs = browser.find_element(By.CSS_SELECTOR, ".tabbed-set")  # the first tier's examples
    shown = {}
    for title in ("curl", "Python (openai)", "Streaming (curl)", "Streaming (Python)", "Example response"):
        tabs.find_element(By.XPATH, f".//label[normalize-space()='{title}']").click()
        shown[title] = WebDriverWait(browser, 5).until(
            lambda d: next((b.text for b in tabs.find_elements(By.CSS_SELECTOR, ".tabbed-block") if b.is_displayed()),
                           None))
    assert shown["curl"].startswith("curl -s https://") and "/v1/chat/completions" in shown["curl"]
    assert "from openai import OpenAI" in shown["Python (openai)"] and "max_retries=" in shown["Python (openai)"]
    assert '"stream": true' in shown["Streaming (curl)"] and "stream=True" in shown["Streaming (Python)"]
    assert '"object": "chat.completion"' in shown["Example response"]
    browser.save_screenshot(str(ARTIFACTS / "api-tabs.png"))
    # beefcake2's reasoning model shows its chain of thought: the response shape and a tip say so
    assert "reasoning_content" in browser.find_element(By.TAG_NAME, "article").text
    notes = [e for e in browser.find_elements(By.CSS_SELECTOR, ".admonition") if e.is_displayed()]
    assert any("During a recovery" in e.text for e in notes), [e.text[:60] for e in notes]

    # a generated picture on the capacity and results pages loads and has a size
    for page in ("capacity", "results"):
        browser.get(f"{served}/{page}/")
        img = browser.find_element(By.CSS_SELECTOR, "article img[src$='.svg']")
        browser.execute_script("arguments[0].scrollIntoView()", img)
        WebDriverWait(browser, 10).until(lambda d, img=img: d.execute_script("return arguments[0].naturalWidth",
                                                                              img) > 0)
        browser.save_screenshot(str(ARTIFACTS / f"{page}.png"))
    # beefcake2's results page shows the labelled GPU benchmark, never a lab figure
    article = browser.find_element(By.TAG_NAME, "article").text
    assert "Not yet verified on beefcake2" in article and "Not yet benched on beefcake2" in article


def test_on_a_phone_no_page_scrolls_sideways_and_every_chart_opens_on_its_own(served, browser):
    """At 390 x 844 (issue 32): the page itself never scrolls sideways (tables and code scroll inside their own
    boxes), and a chart shown below its drawn size links to the picture alone, which a phone can zoom."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.set_window_size(390, 844)
    try:
        for page in ("", "guide/", "capacity/", "api/", "architecture/", "results/", "troubleshooting/", "tiers/",
                     "files/", "monitoring/", "decisions/", "runbooks/deploy-slurm-reasoning/"):
            browser.get(f"{served}/{page}")
            inner, scroll = browser.execute_script(
                "return [window.innerWidth, document.documentElement.scrollWidth]")
            assert scroll <= inner, f"/{page}: the page is {scroll} px wide on a {inner} px screen"
            unlinked = browser.execute_script(
                "return Array.from(document.querySelectorAll('article img[src$=\".svg\"]'))"
                ".filter(i => !(i.parentElement.tagName == 'A' && i.parentElement.getAttribute('href') =="
                " i.getAttribute('src'))).map(i => i.getAttribute('src'))")
            assert not unlinked, f"/{page}: charts that do not open on their own: {unlinked}"
            for src, width in browser.execute_script(  # the charts a phone shows: the narrow drawings, text readable
                    "return Array.from(document.querySelectorAll('article img[src$=\".svg\"]'))"
                    ".filter(i => i.offsetParent !== null).map(i => [i.src, i.clientWidth])"):
                assert src.endswith("-narrow.svg"), f"/{page}: {src} is the wide drawing"
                with urllib.request.urlopen(src) as answer:
                    smallest = smallest_text_px(answer.read().decode(), width)
                assert smallest >= 11, f"/{page}: {src} shows text {smallest:.1f} px tall at {width} px"
        # key columns second (issue 47: Home's URL, the alerts' troubleshooting links, capacity's headroom were
        # off-screen): the first two columns of those tables show without scrolling them
        for page, header in (("", "URL"), ("monitoring/", "troubleshooting"), ("capacity/", "headroom")):
            browser.get(f"{served}/{page}")
            cells = browser.execute_script(
                "return Array.from(document.querySelectorAll('article table thead th:nth-child(2)'))"
                ".map(th => [th.textContent, th.getBoundingClientRect().right])")
            keyed = [(name, right) for name, right in cells if name.startswith(header)]
            assert keyed and all(right <= 390 for _, right in keyed), f"/{page}: {cells}"
        # the troubleshooting page's "When you see" index fits two screens (issue 67: it filled the first 4,600 px)
        browser.get(f"{served}/troubleshooting/")
        index = browser.execute_script("let e = document.getElementById('when'); while (e.tagName != 'UL') "
                                       "{ e = e.nextElementSibling; } return e.getBoundingClientRect().height")
        browser.execute_script("document.getElementById('when').scrollIntoView()")
        browser.save_screenshot(str(ARTIFACTS / "when-phone.png"))
        assert index <= 2 * 844, f"the When you see index is {index:.0f} px tall on a phone"
        # the architecture diagram keeps its own size (its text readable: useMaxWidth off, as the page's source says)
        # and is one column, whole on the phone (issue 47: it showed 39 % of its width, both reasoning nodes hidden)
        browser.get(f"{served}/architecture/")
        WebDriverWait(browser, 10).until(lambda d: d.execute_script(
            "const m = document.querySelector('.mermaid'); return m && m.scrollWidth > 0"))
        inner, wide = browser.execute_script("const m = document.querySelector('.mermaid');"
                                             "return [m.clientWidth, m.scrollWidth]")
        browser.save_screenshot(str(ARTIFACTS / "architecture-phone.png"))
        assert wide <= inner, f"the diagram is {wide} px wide on a {inner} px column"
        with urllib.request.urlopen(f"{served}/architecture/") as answer:
            source = answer.read().decode()
        assert "useMaxWidth&quot;: false" in source or '"useMaxWidth": false' in source
        assert all(n in source for n in ("vasp-01", "vasp-03", "Prometheus", "endpoint registry", "tailscale serve"))
        # the request paths (issue 67: the gateway-to-tier arrows were lost): each route an arrow to its tier's node
        assert "n_slurm_ctl --&gt; n_vasp_01" in source and "n_slurm_ctl --&gt; n_vasp_02" in source
        browser.save_screenshot(str(ARTIFACTS / "architecture-phone.png"))
    finally:
        browser.set_window_size(1400, 1000)


def smallest_text_px(svg: str, shown_width: float) -> float:
    """The smallest text of a chart (matplotlib's SVG, text kept as text) at the width it is shown, in CSS px."""
    drawn = float(re.search(r'viewBox="0 0 ([0-9.]+) ', svg).group(1))
    return min(float(size) for size in re.findall(r"font-size: ([0-9.]+)px", svg)) * shown_width / drawn


def test_the_status_banner_shows_the_alerts_firing_now_as_text(served, browser):
    """Issue 47: where the site is published, nginx serves the alert receiver's firing alerts as status.json; every
    page shows them at its top, each with its troubleshooting entries, as text (an alert's text is the cluster
    file's and Alertmanager's, not the site's). Without it, the page says it has no live status."""
    import json

    from selenium.webdriver.common.by import By

    status = SITE["path"] / "status.json"
    built = status.read_text()  # the build's own: it says the site is a copy
    browser.get(served + "/tiers/")
    quiet = browser.find_element(By.CSS_SELECTOR, ".clusterbook-status").text
    assert "No live alert status in this copy of the site" in quiet, quiet
    status.write_text(json.dumps({"as_of": "2026-11-29T07:00:00Z", "firing": [
        {"alert": "TierDown", "tier": "reasoning", "severity": "critical", "since": "",
         "summary": "<img src=x onerror=window.pwned=1> reasoning does not answer",
         "troubleshooting": "rpc-worker-down, tier-pending javascript:alert(1)"}]}))
    try:
        browser.get(served + "/tiers/")
        box = browser.find_element(By.CSS_SELECTOR, ".clusterbook-status--firing")
        assert box.get_attribute("role") == "alert"
        assert box.text.startswith("1 alert firing (as of 2026-11-29T07:00:00Z)"), box.text
        assert "<img src=x onerror=window.pwned=1> reasoning does not answer" in box.text
        links = [a.get_attribute("href") for a in box.find_elements(By.TAG_NAME, "a")]
        assert links == [served + "/troubleshooting/#rpc-worker-down", served + "/troubleshooting/#tier-pending"]
        assert browser.execute_script("return window.pwned") is None
        status.write_text(json.dumps({"as_of": "2026-11-29T07:05:00Z", "firing": []}))
        browser.get(served + "/")
        assert browser.find_element(By.CSS_SELECTOR, ".clusterbook-status--clear").text == \
            "No alert firing (as of 2026-11-29T07:05:00Z)."
        status.write_text(json.dumps({"as_of": "2026-11-29T07:10:00Z", "firing": [
            {"alert": name, "tier": "reasoning", "node": "vasp-01", "severity": "critical", "since": "",
             "summary": "a summary of the kind Alertmanager sends, long enough to wrap on a phone's screen",
             "troubleshooting": "rpc-worker-down, job-not-starting-reasoning"} for name in ("A", "B", "C", "D")]}))
        browser.set_window_size(390, 844)  # a phone: the banner keeps to a few lines (issue 67: it took 305 px)
        try:
            browser.get(served + "/tiers/")
            height = browser.find_element(By.CSS_SELECTOR, ".clusterbook-status--firing").size["height"]
            assert height <= 160, height
        finally:
            browser.set_window_size(1400, 1000)
        status.unlink()  # the published site whose receiver does not answer (nginx: 502; here: 404): news, not a copy
        browser.get(served + "/")
        down = browser.find_element(By.CSS_SELECTOR, ".clusterbook-status--firing").text
        assert "alert receiver does not answer (HTTP 404)" in down and "copy" not in down, down
    finally:
        status.write_text(built)


def test_a_copy_of_the_site_says_it_has_no_live_status_without_a_failed_request(served, browser):
    """Issue 67 row 9: a local copy logged a console error on every page (status.json 404). The build ships its own
    status.json, which says it is a copy (where the site is published nginx answers status.json from the alert
    receiver instead); a copy opened from disk fetches nothing."""
    import json

    from selenium.webdriver.common.by import By

    assert json.loads((SITE["path"] / "status.json").read_text()) == {"as_of": None, "firing": [], "copy": True}
    browser.get((SITE["path"] / "tiers/index.html").as_uri())
    quiet = browser.find_element(By.CSS_SELECTOR, ".clusterbook-status--quiet").text
    assert "No live alert status in this copy of the site" in quiet, quiet
