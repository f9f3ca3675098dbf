"""The dashboard's pages, rendered with Streamlit's own testing API (AppTest).

Fast tests use small databases written through the Store and Optuna APIs; the tests marked
`engine` render every page on the database of a real 3-trial vLLM study (conftest's
`real_study`: two complete trials, confirmed head to head, and one real segfault).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the dashboard extra is not installed (make install)")

from streamlit.testing.v1 import AppTest  # noqa: E402

from tests.report.test_dashboard_data import (  # noqa: E402
    SERVING_PATH,
    P,
    StudyWriter,
    level,
    mixed_study,
    troubled_study,
)
from tuner.report import dashboard_data as dd  # noqa: E402
from tuner.store import Store  # noqa: E402
from tuner.verdict import rules  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "dashboard" / "app.py"
PAGES = ("views/overview.py", "views/study.py", "views/compare.py", "views/choose.py",
         "views/trial.py")
STUDY_TABS = ("Progress", "Trials", "Load curves", "Failures", "Parameter importance",
              "Predicted vs measured")


def open_page(monkeypatch, url: str, page: str = "views/overview.py", **query: str) -> AppTest:
    """The app on `url`, switched to `page` with these query parameters, rendered."""
    monkeypatch.setenv(dd.STORAGE_ENV, url)
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert_clean(at)
    at.query_params.update(query)
    at.switch_page(page)
    at.run()
    assert_clean(at)
    return at


def assert_clean(at: AppTest) -> None:
    """No exception element (a stack trace) and no 'could not be drawn' fallback."""
    assert not at.exception, [e.value for e in at.exception]
    broken = [e.value for e in at.error if "could not be drawn" in e.value]
    assert not broken, broken


def text(at: AppTest) -> str:
    parts: list[str] = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning",
                 "error", "success", "code", "text"):
        parts += [str(e.value) for e in getattr(at, kind)]
    parts += [f"{m.label}: {m.value}" for m in at.metric]
    parts += [e.label for e in at.expander]
    return "\n".join(parts)


def metrics(at: AppTest) -> dict[str, str]:
    found: dict[str, str] = {}
    for m in at.metric:
        found.setdefault(m.label, m.value)  # the first of a label: the page's headline
    return found


def charts(at: AppTest) -> int:
    return len(at.get("vega_lite_chart"))


def chart_values(at: AppTest, column: str) -> set:
    """The values of one column across the data the page's charts were sent (Arrow)."""
    import pyarrow as pa

    values: set = set()
    for chart in at.get("vega_lite_chart"):
        for dataset in chart.proto.datasets:
            table = pa.ipc.open_stream(dataset.data.data).read_all()
            if column in table.column_names:
                values |= set(table.column(column).to_pylist())
    return values


def show_tab(at: AppTest, tab: str) -> AppTest:
    at.session_state["view"] = tab
    at.run()
    assert_clean(at)
    return at


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def _arrow(data: bytes):
    import pyarrow as pa

    return pa.ipc.open_stream(data).read_all()


def shown(at: AppTest) -> dict[str, str]:
    """What the page sent the browser, element by element (keyed by kind and place): each
    element's message as text (labels, help, options, markdown, captions, tab and expander
    labels), a chart's Vega-Lite spec (titles, fields, tooltips) with its data's columns and text
    values, and a table's column names and cells as drawn (a missing one as its placeholder,
    which the browser shows as "None" unless told otherwise)."""
    from streamlit.testing.v1.element_tree import Block, Dataframe

    found: dict[str, str] = {}

    def visit(node, where: str) -> None:
        key = f"{where}/{node.type}"
        if isinstance(node, Dataframe):
            frame, missing = node.value, node.proto.placeholder or "None"
            cells = [missing if _missing(v) else str(v) for v in frame.to_numpy().ravel()]
            found[key] = "\n".join([*map(str, frame.columns), *cells])
        elif node.type == "vega_lite_chart":
            parts = [node.proto.spec]
            for dataset in node.proto.datasets:
                table = _arrow(dataset.data.data)
                parts += table.column_names
                parts += [str(v) for c in table.columns for v in c.to_pylist()
                          if isinstance(v, str)]
            found[key] = "\n".join(parts)
        elif getattr(node, "proto", None) is not None:
            found[key] = str(node.proto)
        if isinstance(node, Block):
            for i, child in node.children.items():
                visit(child, f"{key}[{i}]")

    visit(at._tree, "")
    return found


def _missing(v) -> bool:
    import pandas as pd

    return v is None or (not isinstance(v, (list, tuple, dict)) and bool(pd.isna(v)))


def mark_data(at: AppTest, mark: str) -> list:
    """Per chart on the page that has a `mark` layer (a diamond marking one point apart is not
    one), the data that layer was sent, as a pyarrow table: a row per mark it draws."""
    found = []
    for chart in at.get("vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        tables = {d.name: _arrow(d.data.data) for d in chart.proto.datasets}
        layers = [layer for layer in spec.get("layer", [spec])
                  if _mark(layer) == mark and "diamond" not in json.dumps(layer.get("mark"))]
        if layers:  # layers that share their data have it once, above them
            found.append(tables[layers[0].get("data", spec.get("data"))["name"]])
    return found


def mark_rows(at: AppTest, mark: str) -> list[int]:
    """Per chart on the page that has a `mark` layer, the number of marks it draws."""
    return [table.num_rows for table in mark_data(at, mark)]


def _mark(layer: dict) -> str | None:
    mark = layer.get("mark")
    return mark.get("type") if isinstance(mark, dict) else mark


def every_view(monkeypatch, url: str, study: str = "s"):
    """Every page of the app on `study`, every tab of its Study page and the Trial page of each
    of its trials, rendered: (where, app) pairs."""
    for page in PAGES:
        at = open_page(monkeypatch, url, page, study=study)
        yield page, at
        if page == "views/study.py":
            for tab in STUDY_TABS:
                yield f"{page} · {tab}", show_tab(at, tab)
    with Store.open(url, create=False) as store:
        numbers = [t.number for t in store.trials(study)]
    for n in numbers:
        yield f"trial {n}", open_page(monkeypatch, url, "views/trial.py", study=study,
                                      trial=str(n))


# ---------------------------------------------------------------- empty states and errors


@pytest.mark.parametrize("page", PAGES)
def test_a_missing_database_is_explained_on_every_page(monkeypatch, tmp_path, page):
    at = open_page(monkeypatch, sqlite_url(tmp_path / "nothing.db"), page)
    assert any("no study database at" in e.value for e in at.error)
    assert "tuner run" in text(at)
    assert not (tmp_path / "nothing.db").exists()


def test_a_foreign_database_is_refused_with_the_stores_line(monkeypatch, tmp_path):
    foreign = tmp_path / "app.db"
    sqlite3.connect(foreign).execute("CREATE TABLE users (id)").connection.close()
    at = open_page(monkeypatch, sqlite_url(foreign), "views/study.py")
    assert any("is not a tuner database" in e.value for e in at.error)
    junk = tmp_path / "notes.db"
    junk.write_text("not a database")
    at = open_page(monkeypatch, sqlite_url(junk))
    assert any("is not an SQLite database" in e.value for e in at.error)


@pytest.mark.parametrize("page", PAGES)
def test_a_database_without_studies_says_so_on_every_page(monkeypatch, tmp_path, page):
    url = sqlite_url(tmp_path / "tuner.db")
    Store.open(url).close()
    at = open_page(monkeypatch, url, page)
    assert not at.error
    assert "No study yet" in text(at) or "needs two or more studies" in text(at)


def test_a_study_without_trials_yet(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    StudyWriter(url, "fresh")
    at = open_page(monkeypatch, url, "views/study.py", study="fresh")
    assert "fresh" in at.title[0].value and "empty" in at.title[0].value
    assert "no trial yet" in text(at)
    assert metrics(at)["complete"] == "0"


def test_a_study_with_only_failed_trials_explains_why_there_is_no_result(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    w = StudyWriter(url, "broken")
    w.fail(0, P(2, True), "crash", "Segfault encountered in fused_moe_impl",
           log_tail="...\nSegfault encountered in fused_moe_impl")
    w.fail(1, P(1, batch=4), "oom", "KV cache does not fit", log_tail="...\nout of memory")
    w.infeasible(2, P(1, True), "expert parallel over a single rank")
    at = open_page(monkeypatch, url, "views/study.py", study="broken")
    m = metrics(at)
    assert (m["complete"], m["failed"], m["infeasible"]) == ("0", "2", "1")
    assert m["best tok/s/core"] == "–"  # a CPU study's figures are per core
    assert any("No trial met the SLA yet" in w.value for w in at.warning)
    assert not at.download_button
    assert "No concurrency level has been measured yet" in text(at)

    show_tab(at, "Failures")
    page = text(at)
    for reason in ("Segfault encountered in fused_moe_impl", "KV cache does not fit",
                   "expert parallel over a single rank"):
        assert reason in page
    assert "out of memory" in page  # a log tail
    show_tab(at, "Parameter importance")
    assert "at least 2 complete configurations" in text(at)

    at = open_page(monkeypatch, url, "views/trial.py", study="broken", trial="0")
    assert any("Segfault encountered" in e.value for e in at.error)
    assert "tail kept in the database" in text(at)
    at = open_page(monkeypatch, url, "views/trial.py", study="broken", trial="2")
    assert "rejected before launch" in text(at)


# ---------------------------------------------------------------- a synthetic study


def test_overview_lists_every_study_with_counts_and_best(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    mixed_study(url, "cpu-study")
    StudyWriter(url, "h200-study", gpu_type="H200").running(0, P())
    at = open_page(monkeypatch, url)
    table = at.dataframe[0].value.set_index("study")
    assert table.loc["cpu-study", "best tok/s/device"] == 1500  # a core beside a GPU
    assert table.loc["cpu-study", ["complete", "failed", "infeasible", "running"]].tolist() == [
        2, 1, 1, 0]
    assert table.loc["h200-study", "running"] == 1
    assert table.loc["h200-study", "state"] == "running"
    assert table.loc["h200-study", "hardware"] == "H200"
    assert metrics(at)["studies"] == "2"
    assert len(at.get("page_link")) >= 2


def test_study_page_shows_the_best_configuration_to_take_away(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    mixed_study(url)
    at = open_page(monkeypatch, url, "views/study.py", study="s")
    assert metrics(at)["best tok/s/core"] == "1,500"
    page = text(at)
    assert "Best configuration · trial 2" in page
    assert "`tp=1` `ep=off` `batch=4`" in page
    assert any("vllm serve" in h.value for h in at.html)
    assert {"config.yaml", "launch.sh", "best.json"} <= {b.label for b in at.download_button}
    assert charts(at) >= 2  # the Pareto chart and the progress chart
    assert "2 on the Pareto front" in page and "SLA's per-user floor" in page


def test_trials_tab_filters_and_sorts(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    mixed_study(url)
    at = show_tab(open_page(monkeypatch, url, "views/study.py", study="s"), "Trials")
    table = at.dataframe[-1].value
    assert table["trial"].tolist() == [2, 0, 1, 3]  # by tok/s/GPU, gaps last
    at.multiselect(key="trials_state").set_value(["complete"]).run()
    assert at.dataframe[-1].value["trial"].tolist() == [2, 0]
    at.multiselect(key="trials_tp").set_value([2]).run()
    assert at.dataframe[-1].value["trial"].tolist() == [0]
    assert "1 of 4 trials" in text(at)
    at.multiselect(key="trials_state").set_value([]).run()
    at.selectbox(key="trials_sort").set_value("trial").run()
    at.toggle(key="trials_desc").set_value(False).run()
    assert at.dataframe[-1].value["trial"].tolist() == [0, 1]


@pytest.mark.parametrize("tab", STUDY_TABS)
def test_every_study_tab_renders(monkeypatch, tmp_path, tab):
    url = sqlite_url(tmp_path / "tuner.db")
    mixed_study(url)
    at = show_tab(open_page(monkeypatch, url, "views/study.py", study="s"), tab)
    page = text(at)
    expected = {"Progress": "best figure so far", "Trials": "of 4 trials",
                "Load curves": "a diamond at the highest load that met it",
                "Failures": "Segfault encountered in fused_moe_impl",
                "Parameter importance": "rough hint",
                "Predicted vs measured": "No predictions are stored for this study"}[tab]
    assert expected in page


def test_the_load_curves_tab_draws_each_trials_curve_and_what_its_search_found(monkeypatch,
                                                                              tmp_path):
    from tests.report.test_load_curves import SEARCH, searched_study

    url = sqlite_url(tmp_path / "tuner.db")
    searched_study(url)
    at = show_tab(open_page(monkeypatch, url, "views/study.py", study="s"), "Load curves")
    before = charts(at)
    found = at.dataframe[-1].value
    assert found["trial"].tolist() == [0] and found["load search"].tolist() == [SEARCH]
    assert found[dd.LOAD_AT_SLA].tolist() == [8]
    for y in ("TTFT p90 ms", dd.USER_P90):  # the same curves against latency and per user
        at.radio(key="curve_y").set_value(y).run()
        assert_clean(at)
        assert charts(at) == before >= 1


def test_a_searched_trials_page_draws_its_curve_and_says_what_the_search_found(monkeypatch,
                                                                             tmp_path):
    from tests.report.test_load_curves import SEARCH, searched_study

    url = sqlite_url(tmp_path / "tuner.db")
    searched_study(url)
    at = open_page(monkeypatch, url, "views/trial.py", study="s", trial="0")
    assert f"load search: {SEARCH}" in text(at)
    assert charts(at) >= 1
    assert at.dataframe[1].value["concurrency"].tolist() == [1, 2, 4, 8, 16, 12]


def test_trial_page_shows_config_plan_levels_and_exports(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    mixed_study(url)
    at = open_page(monkeypatch, url, "views/trial.py", study="s")  # the best by default
    assert "Trial 2 of s" in at.title[0].value
    codes = [c.value for c in at.code]
    assert "vllm serve /models/tiny-gpt-oss --config config.yaml --port 41000" in codes
    assert "tensor-parallel-size: 1" in codes
    levels = at.dataframe[1].value
    assert levels["concurrency"].tolist() == [2, 8]
    assert {"config.yaml", "launch.sh", "best.json"} <= {b.label for b in at.download_button}
    assert "no server log was recorded for this trial" in text(at)


def test_a_repeated_open_loop_level_shows_its_rate_interval_and_convergence(monkeypatch,
                                                                            tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    w = StudyWriter(url)
    w.complete(0, P(), [level(64, 1000.0, 140.0, request_rate=4.0, rounds=5,
                              output_tok_s_ci95=50.0, converged=False, kv_cache_usage_max=0.3)])
    at = open_page(monkeypatch, url, "views/trial.py", study="s")
    assert metrics(at)["at rate"] == "4 req/s"
    assert "95% confidence interval: ±5.0% NOT CONVERGED" in text(at)
    levels = at.dataframe[1].value
    assert levels["tok/s 95% CI"].tolist() == ["±5.0% NOT CONVERGED"]
    assert levels["rate req/s"].tolist() == [4.0] and levels["KV cache max"].tolist() == [0.3]


def test_compare_puts_two_studies_on_one_chart_and_one_table(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    mixed_study(url, "cpu-study")
    w = StudyWriter(url, "h200-study", gpu_type="H200")
    w.complete(0, P(2), [level(8, 5000.0, 90.0), level(64, 9000.0, 60.0)])
    at = open_page(monkeypatch, url, "views/compare.py")
    assert charts(at) == 1
    table = at.dataframe[0].value.set_index("study")
    assert table.loc["h200-study", "best tok/s/device"] == 9000  # per GPU beside per core
    assert table.loc["cpu-study", "best tok/s/device"] == 1500
    assert table.loc["h200-study", "hardware"] == "H200"


def test_choose_puts_both_gpu_types_on_one_chart_and_the_cheapest_on_a_card(monkeypatch,
                                                                           tmp_path):
    # SYNTHETIC ROWS: an H200-like and a B200-like study (tests.choose_studies).
    from tests.choose_studies import H200_PRICE, TARGET, h200_and_b200, usd_per_mtok

    url = sqlite_url(tmp_path / "tuner.db")
    h200_and_b200(url)
    at = open_page(monkeypatch, url, "views/choose.py")
    at.number_input(key="choose_user").set_value(TARGET).run()
    assert_clean(at)
    assert charts(at) == 1
    # One colour per GPU type and engine, both on the one chart.
    assert {"H200 · vllm", "B200 · vllm"} <= chart_values(at, dd.HARDWARE)
    assert metrics(at)["USD per million output tokens"] == \
        f"{usd_per_mtok(H200_PRICE, 1, 2400.0):,.4g}"
    assert "Cheapest meeting the targets · trial 0" in text(at)
    assert {"config.yaml", "launch.sh", "best.json"} <= {b.label for b in at.download_button}
    runners = at.dataframe[-1].value
    assert runners[["study", "trial"]].values.tolist() == [["b200", 0], ["h200", 1]]
    assert runners[dd.GAP].iloc[0] == pytest.approx(
        (usd_per_mtok(2.90, 1, 4000.0) / usd_per_mtok(H200_PRICE, 1, 2400.0) - 1) * 100)

    at.segmented_control(key="choose_by").set_value("throughput").run()
    assert_clean(at)
    assert "Fastest meeting the targets · trial 0" in text(at)
    assert metrics(at)["GPU · engine"] == "B200 · vllm"
    at.number_input(key="choose_user").set_value(1000.0).run()
    assert_clean(at)
    assert "the fastest per-user p90 that met its SLA is 320.0 tok/s" in text(at)


# ---------------------------------------------------------------- a reader, while a study writes


def _dump(path: Path) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


def test_rendering_every_page_changes_nothing_in_the_database(monkeypatch, tmp_path):
    db = tmp_path / "tuner.db"
    mixed_study(sqlite_url(db))
    before = _dump(db)
    for page in PAGES:
        at = open_page(monkeypatch, sqlite_url(db), page, study="s")
        if page == "views/study.py":
            for tab in STUDY_TABS:
                show_tab(at, tab)
    assert _dump(db) == before


def listing(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file in the folder: its size and its bytes' hash."""
    return {p.name: (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.iterdir())}


def test_a_copied_database_opened_read_only_leaves_its_folder_byte_identical(monkeypatch,
                                                                           tmp_path):
    study = tmp_path / "study"
    study.mkdir()
    troubled_study(sqlite_url(study / "tuner.db"))
    shared = tmp_path / "shared"  # the database alone in a folder, as one is shared
    shared.mkdir()
    source, copy = sqlite3.connect(study / "tuner.db"), sqlite3.connect(shared / "tuner.db")
    source.backup(copy)  # a consistent copy of a study's WAL database, itself in WAL mode
    copy.close()
    source.close()
    before = listing(shared)
    assert list(before) == ["tuner.db"]
    for where, _ in every_view(monkeypatch, sqlite_url(shared / "tuner.db")):
        # While the dashboard holds the database open: no -wal, -shm or -journal beside it.
        assert listing(shared) == before, where


WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from tests.report.test_dashboard_data import P, StudyWriter, level
    w = StudyWriter({url!r}, "live")
    print("ready", flush=True)
    for i in range(40):
        w.complete(i, P(1 + i % 2, batch=4 if i % 3 else 16),
                   [level(2, 100.0 + i, 200.0), level(8, 300.0 + i, 120.0)])
        time.sleep(0.02)
""")


def test_the_dashboard_keeps_working_while_a_study_writes(monkeypatch, tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    code = WRITER.format(tests=str(REPO), url=url)
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        seen = []
        at = open_page(monkeypatch, url, "views/study.py", study="live")
        deadline = time.monotonic() + 60
        while writer.poll() is None and time.monotonic() < deadline:
            at.run()
            assert_clean(at)
            assert not at.error, [e.value for e in at.error]
            seen.append(int(metrics(at)["complete"]))
        assert writer.wait(timeout=60) == 0
        at.run()
        assert_clean(at)
        assert metrics(at)["complete"] == "40"
        assert len(seen) >= 2 and seen == sorted(seen)
    finally:
        writer.kill()


RENDER_ALL = textwrap.dedent("""
    import os, sys
    os.environ[{env!r}] = {url!r}
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file({app!r}, default_timeout=60)
    at.query_params["study"] = "s"
    at.run()
    for page in {pages!r}:
        at.switch_page(page)
        at.run()
        assert not at.exception, at.exception
    for tab in {tabs!r}:
        at.switch_page("views/study.py")
        at.session_state["view"] = tab
        at.run()
    bad = [m for m in {SERVING_PATH!r} if m in sys.modules]
    print(bad)
    sys.exit(1 if bad else 0)
""")


def test_no_page_imports_the_launcher_or_the_study_loop(tmp_path):
    url = sqlite_url(tmp_path / "tuner.db")
    mixed_study(url)
    code = RENDER_ALL.format(env=dd.STORAGE_ENV, url=url, app=str(APP), pages=PAGES,
                             tabs=STUDY_TABS, SERVING_PATH=SERVING_PATH)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


# ---------------------------------------------------------------- a real study's database


@pytest.fixture
def real_url(real_study) -> str:
    return sqlite_url(real_study.folder / "tuner.db")


@pytest.mark.engine
def test_every_page_renders_on_a_real_studys_database(monkeypatch, real_url):
    store = Store.open(real_url, create=False)
    trials = store.trials("test-study")
    study = store.get_study("test-study")
    best = rules.winner(study, trials)
    shown = rules.figure(best, study).value  # the figure that decided its verdict
    counts = {s: sum(t.state == s for t in trials) for s in dd.STATES}
    assert counts["complete"] == 2 and counts["failed"] == 1

    at = open_page(monkeypatch, real_url)
    row = at.dataframe[0].value.set_index("study").loc["test-study"]
    assert row["best tok/s/core"] == round(shown)  # a CPU study
    assert (row["complete"], row["failed"], row["infeasible"]) == (
        counts["complete"], counts["failed"], counts["infeasible"])

    at = open_page(monkeypatch, real_url, "views/study.py", study="test-study")
    m = metrics(at)
    assert m["best tok/s/core"] == f"{shown:,.0f}"
    assert (m["complete"], m["failed"], m["infeasible"]) == (
        str(counts["complete"]), str(counts["failed"]), str(counts["infeasible"]))
    assert f"Best configuration · trial {best.number}" in text(at)
    assert {"config.yaml", "launch.sh", "best.json"} <= {b.label for b in at.download_button}
    assert any("vllm serve" in h.value for h in at.html)
    assert charts(at) >= 2
    for tab in STUDY_TABS:
        show_tab(at, tab)
        if tab == "Failures":
            page = text(at)
            assert "Segfault" in page and "crash" in page
        if tab == "Trials":
            assert len(at.dataframe[-1].value) == len(trials)
        if tab == "Parameter importance":
            assert charts(at) >= 2 or "Importance needs" in text(at)

    at = open_page(monkeypatch, real_url, "views/trial.py", study="test-study",
                   trial=str(best.number))
    assert f"Trial {best.number} of test-study" in at.title[0].value
    assert any("vllm serve" in c.value and "--config" in c.value for c in at.code)
    assert len(at.dataframe[1].value) == len(best.measurements)
    assert "server.log" in text(at)  # the real log file, read beside the database

    failed = next(t for t in trials if t.state == "failed")
    at = open_page(monkeypatch, real_url, "views/trial.py", study="test-study",
                   trial=str(failed.number))
    assert any("Segfault" in e.value for e in at.error)

    at = open_page(monkeypatch, real_url, "views/compare.py")
    assert "needs two or more studies" in text(at)


def test_predicted_vs_measured_tab_draws_the_stored_predictions(monkeypatch, tmp_path):
    from tests.report.test_dashboard_data import _prediction

    url = sqlite_url(tmp_path / "tuner.db")
    w = mixed_study(url)
    w.store.save_predictions("s", [_prediction(P(1, batch=4), 2, 600.0),
                                   _prediction(P(1, batch=4), 8, 1200.0)],
                             source="perfmodel", engine="vllm", gpu_type="cpu",
                             calibration="published.csv")
    at = show_tab(open_page(monkeypatch, url, "views/study.py", study="s"),
                  "Predicted vs measured")
    assert "2 measured levels with a stored prediction" in text(at)
    assert "median |error| 20%" in text(at)
    assert at.dataframe[-1].value["error %"].round(1).tolist() == [20.0, -20.0]


def test_the_dashboard_leaves_an_older_database_byte_identical_and_creates_no_file(monkeypatch,
                                                                                  tmp_path):
    from tests.store.test_read_only_open import _snapshot
    from tests.store.test_store import build_old_schema

    old = tmp_path / "old"
    old.mkdir()
    build_old_schema(old / "tuner.db")
    before = _snapshot(old)
    missing = tmp_path / "missing"
    missing.mkdir()
    for page in PAGES:
        at = open_page(monkeypatch, sqlite_url(old / "tuner.db"), page)
        assert any("older tuner schema" in e.value and "tuner upgrade" in e.value
                   for e in at.error), page
        at = open_page(monkeypatch, sqlite_url(missing / "tuner.db"), page)
        assert any("no study database at" in e.value for e in at.error), page
    assert _snapshot(old) == before
    assert list(missing.iterdir()) == []


def test_every_page_gives_the_winner_the_figure_that_decided_its_verdict(monkeypatch, tmp_path):
    # Trial 2's confirmation (1,300) differs from its first run (1,500): the confirmation is
    # the winner's figure on every page, and the first run appears as a run, with the reason.
    url = sqlite_url(tmp_path / "tuner.db")
    troubled_study(url)

    study = open_page(monkeypatch, url, "views/study.py", study="s")
    trial = open_page(monkeypatch, url, "views/trial.py", study="s", trial="2")
    choose = open_page(monkeypatch, url, "views/choose.py")

    assert metrics(study)["best tok/s/core"] == "1,300"
    assert metrics(study)["tok/s/core"] == "1,300"  # the winner's card
    assert metrics(trial)["tok/s/core"] == "1,300"
    assert "tok/s/core" in metrics(choose) and metrics(choose)["tok/s/core"] == "1,300"
    other = text(trial)
    assert "from its confirmation; its first run 1,500: differs" in other
