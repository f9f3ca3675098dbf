"""The workload section of a study spec: prompt sources, the chat API, Poisson arrivals and
repeats; every inconsistency is one line naming the field and the fix."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import REPO, base_spec, write_yaml
from tuner.spec.errors import BadInput
from tuner.spec.study_spec import load_spec


def load(tmp_path: Path, **workload):
    spec = base_spec(tmp_path / "model")
    spec["workload"].update(workload)
    return load_spec(write_yaml(tmp_path / "study.yaml", spec))


def test_the_defaults_are_the_single_closed_loop_measurement(tmp_path):
    w = load(tmp_path).workload
    assert (w.prompt_source, w.api, w.arrival, w.max_rounds, w.request_rates) == (
        "synthetic", "completions", "concurrency", 1, None)
    # Per level: warm-up, the round, and the most in flight (8), cancelled when it ends.
    assert w.level_count == 2 and w.prompts_needed() == 2 * (2 + 16 + 8)


def test_poisson_levels_are_the_rates_and_rounds_multiply_the_prompts(tmp_path):
    w = load(tmp_path, arrival="poisson", request_rates=[8, 2.5], max_rounds=3).workload
    assert w.request_rates == [2.5, 8]
    assert w.level_count == 2 and w.prompts_needed() == 2 * (2 + 16 * 3)


def test_concurrency_auto_is_a_load_search_with_defaults(tmp_path):
    w = load(tmp_path, concurrency="auto").workload
    assert w.auto and w.concurrency == "auto"
    assert (w.search.start, w.search.max, w.search.resolution) == (1, None, 0.25)
    with pytest.raises(ValueError, match="no fixed level count"):
        w.level_count  # noqa: B018 (the property raises)
    # A search sizes its prompts by its most levels and in flight.
    assert w.prompts_needed(levels=5, in_flight=16) == 5 * (2 + 16 + 16)
    assert w.plan_levels() == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def test_request_rates_auto_searches_the_rate_under_a_fixed_cap(tmp_path):
    w = load(tmp_path, arrival="poisson", request_rates="auto",
             load_search={"start": 0.5, "max": 64}).workload
    assert w.auto and w.request_rates == "auto" and w.concurrency == [2, 8]
    assert (w.search.start, w.search.max) == (0.5, 64)
    # Fixed rates with concurrency auto: the cap is the server's most in flight, no search.
    assert not load(tmp_path, arrival="poisson", request_rates=[1.0],
                    concurrency="auto").workload.auto


def test_a_prompt_file_is_found_relative_to_the_spec(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "p.jsonl").write_text('{"prompt": "hi"}\n')
    w = load(tmp_path, prompt_source="file", prompt_file="data/p.jsonl", api="chat").workload
    assert w.prompt_file == str((tmp_path / "data" / "p.jsonl").resolve())


@pytest.mark.parametrize("workload, message", [
    ({"prompt_source": "file"}, "workload: prompt_source file needs prompt_file"),
    ({"prompt_file": "p.jsonl"}, "prompt_file is read only with prompt_source file"),
    ({"output_len_from": "dataset"}, "output_len_from dataset needs prompt_source file"),
    ({"api": "chat"}, "api chat sends text, and random token ids are not text: use "
                      "prompt_source corpus or file"),
    ({"arrival": "poisson"}, "arrival poisson needs request_rates"),
    ({"request_rates": [1.0]}, "request_rates apply to arrival poisson"),
    ({"arrival": "poisson", "request_rates": [0]}, "workload.request_rates: request rates must"),
    ({"concurrency": []}, "concurrency needs at least one level, or auto"),
    ({"concurrency": "max"}, "workload.concurrency"),
    ({"load_search": {"start": 2}}, "load_search applies to concurrency auto or request_rates "
                                    "auto"),
    ({"arrival": "poisson", "concurrency": "auto", "request_rates": "auto"},
     "a load search searches one load"),
    ({"concurrency": "auto", "load_search": {"start": 8, "max": 4}},
     "load_search.max (4) is below load_search.start (8)"),
    ({"concurrency": "auto", "load_search": {"resolution": 0}},
     "workload.load_search.resolution: Input should be greater than 0"),
    ({"max_rounds": 0}, "workload.max_rounds: Input should be greater than or equal to 1"),
    ({"ci_target": 1.5}, "workload.ci_target: Input should be less than 1"),
    ({"api": "responses"}, "workload.api: Input should be 'completions' or 'chat'"),
    ({"range_ratio": 1.0}, "workload.range_ratio: Input should be less than 1"),
    ({"prompt_source": "file", "prompt_file": "p.jsonl", "range_ratio": 0.5},
     "range_ratio spreads synthetic and corpus lengths; a prompt file's prompts have their "
     "own: remove range_ratio"),
])
def test_an_inconsistent_workload_is_one_line_naming_the_field(tmp_path, workload, message):
    with pytest.raises(BadInput) as e:
        load(tmp_path, **workload)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_chat_example_spec_loads_with_its_prompt_file():
    from tuner.measure.prompt_file import read_prompt_file

    w = load_spec(REPO / "examples" / "tiny-moe-chat-cpu.yaml").workload
    assert (w.api, w.arrival, w.prompt_source, w.max_rounds) == ("chat", "concurrency", "file", 5)
    assert len(read_prompt_file(Path(w.prompt_file))) == 24


def test_the_sweep_gets_one_prompt_per_request_with_spread_lengths(tmp_path):
    from tests.plan.test_plan import _context, small_spec
    from tuner.measure.prompts import sweep_prompts

    ctx = _context(small_spec(tmp_path), [])
    # The example's GPU sweep holds some 50 million prompt ids; a few hundred prompts show it.
    w = ctx.spec.workload.model_copy(update={"range_ratio": 0.5, "max_rounds": 2,
                                             "concurrency": [4, 16], "requests_per_level": 64})
    ctx = replace(ctx, spec=ctx.spec.model_copy(update={"workload": w}))
    prompts = sweep_prompts(w, Path(ctx.settings.model), ctx.shape.vocab_size)
    assert len(prompts) == w.prompts_needed()
    ins = [len(p.tokens) for p in prompts]
    outs = [p.output_len for p in prompts]
    assert min(ins) >= round(w.input_len * 0.5) and max(ins) <= round(w.input_len * 1.5)
    assert min(outs) >= round(w.output_len * 0.5) and max(outs) <= round(w.output_len * 1.5)
    assert len(set(ins)) > 10 and len(set(outs)) > 10
    assert len({tuple(p.tokens) for p in prompts}) == len(prompts)  # none sent twice
    ctx.store.close()


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_example_spec_loads(path: Path):
    from tuner.spec.study_spec import resolve_space_path

    spec = load_spec(path)
    assert resolve_space_path(spec, path).exists()


@pytest.mark.parametrize("workload, message", [
    ({"concurrency": [4, 1_000_000]}, "concurrency 1,000,000 is more requests in flight than "
     "one load generator can hold (at most 60,000): lower it"),
    ({"arrival": "poisson", "request_rates": [1e9]}, "request rate 1e+09/s is more than the "
     "load generator can send"),
    ({"requests_per_level": 10_000_000}, "the sweep sends 20,000,020 requests"),
    ({"input_len": 10**9}, "workload.input_len"),
])
def test_a_load_beyond_what_a_load_generator_holds_is_one_line(tmp_path, workload, message):
    with pytest.raises(BadInput) as e:
        load(tmp_path, **workload)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_load_search_example_spec_loads():
    spec = load_spec(REPO / "examples" / "tiny-moe-auto-cpu.yaml")
    w = spec.workload
    assert w.auto and w.concurrency == "auto" and w.arrival == "concurrency"
    assert (w.search.start, w.search.max, w.search.resolution) == (1, None, 0.25)


@pytest.mark.parametrize("workload", [{"concurrency": "auto"},
                                      {"arrival": "poisson", "concurrency": [8],
                                       "request_rates": "auto"}])
def test_a_load_search_without_an_sla_target_is_refused_at_load(tmp_path, workload):
    spec = base_spec(tmp_path / "model", sla={})
    spec["workload"].update(workload)
    with pytest.raises(BadInput) as e:
        load_spec(write_yaml(tmp_path / "study.yaml", spec))
    auto = "concurrency" if "request_rates" not in workload else "request_rates"
    assert f"workload.{auto}: auto searches for the highest load that meets the SLA, and the " \
        "sla sets no target: set sla.ttft_p90_ms" in str(e.value)


def test_a_number_in_exponent_notation_is_read_as_a_number_and_held_to_its_limit(tmp_path):
    spec_path = write_yaml(tmp_path / "study.yaml", base_spec(tmp_path / "model"))
    spec_path.write_text(spec_path.read_text().replace("- 8\n", "- 1e9\n"))
    with pytest.raises(BadInput) as e:
        load_spec(spec_path)
    assert "concurrency 1,000,000,000 is more requests in flight than one load generator can " \
        "hold (at most 60,000)" in str(e.value)


def test_a_missing_task_file_names_the_quality_field():
    from tuner.measure.prompt_file import PromptFileError
    from tuner.measure.quality_tasks import read_tasks

    with pytest.raises(PromptFileError, match="does not exist: check quality.tasks.file"):
        read_tasks(Path("/nonexistent/tasks.jsonl"))
