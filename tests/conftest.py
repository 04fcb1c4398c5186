import sys
from pathlib import Path
from typing import Any

import pytest

# tests import their plain-NumPy references as ``import naive``, and what they share
# besides (configs, agents, process helpers) as ``import helpers``
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """A run directory from a real short training (CartPole-v1, S1 network 4-64-64-2)."""
    from ember_np.cli import main

    root = tmp_path_factory.mktemp("runs")
    code = main(
        ["train", "CartPole-v1", "--steps", "600", "--eval-every", "300", "--eval-episodes", "1",
         "--checkpoint-freq", "300", "--root", str(root), "--preset", "ember",
         "--set", "min_replay_size=100", "hidden_sizes=[64,64]", "--quiet"]
    )  # fmt: skip
    assert code == 0
    (run_dir,) = (root / "CartPole-v1" / "ember").iterdir()
    return run_dir


# The longest tests, started first so that no worker is left running one of them
# alone at the end (pytest-xdist hands tests out in collection order). A renamed
# test only loses its place at the front. Not test_reliability's SIGKILL test: its
# first child must checkpoint within 60 s, too tight while a cold cache compiles.
SLOW_FIRST = (
    "test_cold_warm.py::test_a_cold_fused_run_compiles_each_kernel_once_and_env_dynamics_stay_exact",
    "test_cold_warm.py::test_runs_from_an_empty_cache_and_a_full_one_write_the_same_bytes",
    "test_precompile.py::test_a_cold_default_run_compiles_in_workers_within_bounds_then_nothing",
    "test_tune_workers.py::test_ctrl_c_fails_the_running_trials_and_a_rerun_reaches_exactly_the_trials",
    "test_multiseed.py::test_sigkilled_worker_leaves_other_seeds_and_resume_finishes",
    "test_dask.py::test_a_worker_sigkilled_mid_seed_costs_only_that_seeds_progress",
    "test_dask.py::test_a_client_killed_mid_run_leaves_a_parent_that_resume_on_the_cluster_finishes",
    "test_tune.py::test_postgres_three_workers_one_killed_mid_trial_ends_with_exactly_the_trials",
    "test_tune_workers.py::test_workers_end_with_their_command_and_a_rerun_reaches_exactly_the_trials",
    "test_tune.py::test_the_storage_password_never_reaches_a_workers_command_line",
    "test_cli.py::test_train_uses_the_compiled_env_and_says_so_in_one_line",
    "test_action_masks.py::test_the_next_action_obeys_the_next_mask_while_exploring_and_greedy",
)


def _slow_rank(item: pytest.Item) -> int:
    for rank, name in enumerate(SLOW_FIRST):
        if name in item.nodeid:
            return rank
    return len(SLOW_FIRST)


#: The tests each pytest-xdist group runs on one worker (``--dist loadgroup``), by test
#: module or ``module::test function``: they share what is slow to make (a cold-cache
#: process, a Dask cluster, the built docs site; kernels that only they compile, and
#: module fixtures), which each worker would otherwise make again. The tests also say
#: so with ``pytest.mark.xdist_group(...)``, but pytest-xdist 3.8 under pytest 9.2
#: ignores that mark (it renames node ids, which pytest 9.2 no longer reads), so the
#: scheduler below groups by this table, which collection checks against the marks.
_SITE = "test_docs.py::"
XDIST_GROUPS = {
    "test_cold_warm.py": "cold_cache",
    "test_noisy.py": "noisy",
    "test_distributional.py": "distributional",
    "test_distributional_agent.py": "distributional",
    "test_dask.py": "dask",
    **{_SITE + name: "docs_site" for name in (
        "test_mkdocs_build_strict_has_no_warning", "test_built_site_has_no_broken_internal_link",
        "test_every_page_of_the_site_has_text_beyond_its_title",
        "test_api_reference_documents_every_public_name",
        "test_cli_reference_lists_every_command_and_option",
        "test_options_checkpoint_keys_and_learning_table_are_two_clicks_from_home")},
}  # fmt: skip


def _group_of(nodeid: str) -> str | None:
    """The XDIST_GROUPS group of a test id (``path/test_x.py::test_y[params]``), if any."""
    module, _, rest = nodeid.split("@", 1)[0].partition("::")
    module = module.rsplit("/", 1)[-1]
    function = rest.split("[", 1)[0]
    return XDIST_GROUPS.get(f"{module}::{function}", XDIST_GROUPS.get(module))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_slow_rank)  # stable: every other test keeps its order
    for item in items:  # one list of groups: the modules' marks name the table's
        marks = {mark.args[0] for mark in item.iter_markers("xdist_group")}
        group = _group_of(item.nodeid)
        assert marks == ({group} if group else set()), (item.nodeid, marks, group)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``, each module of XDIST_GROUPS in its group's one work unit
    (every other test a unit of its own, as loadgroup does)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ModuleGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group_of(nodeid) or super()._split_scope(nodeid)

    return ModuleGroupScheduling(config, log)


def pytest_report_header() -> str:
    """Which copy of ember_np the tests import: the checkout, or an installed wheel (nox)."""
    import ember_np

    return f"ember_np {ember_np.__version__}: {Path(ember_np.__file__).parent}"
