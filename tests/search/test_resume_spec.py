"""Resuming a study stored before the workload gained fields (prompt files, chat, arrivals,
repeats): the new fields' defaults measure what was measured before, so it resumes; a real
change of workload is still refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.plan.test_plan import _context, small_spec
from tuner.search.bridge import load_or_create_study
from tuner.spec.errors import BadInput

NEW_FIELDS = ("prompt_file", "api", "output_len_from", "arrival", "request_rates", "max_rounds",
              "ci_target")


def store_older_study(ctx) -> None:
    old = ctx.spec.model_dump(mode="json")
    for key in NEW_FIELDS:
        old["workload"].pop(key)
    ctx.store.ensure_study(ctx.name, engine="vllm", model="m", gpu_type=ctx.spec.hardware.gpu_type,
                           spec=old, space=ctx.space.model_dump(mode="json"),
                           tuner_version="0.0.9")


def test_a_study_stored_before_the_new_workload_fields_resumes(tmp_path: Path):
    ctx = _context(small_spec(tmp_path), [])
    store_older_study(ctx)
    assert load_or_create_study(ctx).study_name == ctx.name
    ctx.store.close()


def test_a_changed_workload_is_still_refused(tmp_path: Path):
    ctx = _context(small_spec(tmp_path), [])
    store_older_study(ctx)
    w = ctx.spec.workload.model_copy(update={"max_rounds": 3})
    ctx = replace(ctx, spec=ctx.spec.model_copy(update={"workload": w}))
    with pytest.raises(BadInput, match="already exists with a different workload"):
        load_or_create_study(ctx)
    ctx.store.close()
