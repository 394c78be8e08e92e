"""The agent's error paths under fault injection (tests/local/native/c/faults.c): each case makes
one libc call fail with a chosen errno and checks the -errno the function returns, its reason, and
that nothing stays half-initialised. Every case runs with errno clobbered by the success paths of
strerror, vsnprintf, close, munmap, fclose and free (legal for a C library), so reading errno
late in an error path shows up as EDOM instead of the real error."""

import os
import subprocess

import pytest

from bench.plan.planfile import write_plan
from tests.support import nativelib as nl
from tests.support.native_plans import make_plan

pytestmark = pytest.mark.native

WRAPPED = ["pread", "preadv2", "open", "fopen", "ftruncate", "fstat", "write", "mmap", "munmap",
           "mlock", "calloc", "pthread_create", "pthread_mutex_init", "pthread_mutex_destroy",
           "pthread_cond_init", "pthread_cond_destroy", "strerror", "vsnprintf", "close",
           "fclose", "free"]


@pytest.fixture(scope="session")
def faults(tmp_path_factory) -> str:
    """The harness, linked with every agent source but main.c."""
    cc = nl.shutil.which("cc") or nl.shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (build-essential)")
    out = tmp_path_factory.mktemp("faults") / "faults"
    srcs = sorted(str(p) for p in nl.NATIVE.glob("*.c") if p.name != "main.c")
    cmd = [cc, "-std=gnu11", "-D_GNU_SOURCE", "-U_FORTIFY_SOURCE", "-O1", "-g", "-pthread",
           "-Wall", "-Wextra", "-Werror", "-I", str(nl.NATIVE), "-o", str(out),
           str(nl.REPO / "tests" / "local" / "native" / "c" / "faults.c"), *srcs,
           "-Wl," + ",".join(f"--wrap={f}" for f in WRAPPED)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    return str(out)


def run_case(faults, *args, tmp):
    # the harness's scratch files go to the test's own directory
    r = subprocess.run([faults, *map(str, args)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "TMPDIR": str(tmp)})
    assert r.returncode == 0, f"{args[0]}:\n{r.stderr}{r.stdout}"
    assert f"ok {args[0]}" in r.stdout


@pytest.mark.parametrize("case", ["freq-enoent", "io-nowait-eio", "io-read-eio", "io-probe",
                                  "progress-open", "snap-write", "snap-init"])
def test_errno_survives_error_paths(faults, case, tmp_path):
    run_case(faults, case, tmp=tmp_path)


@pytest.mark.parametrize("case", ["arena-preload-eio", "arena-mmap-mlock", "pool-open"])
def test_errno_survives_pool_error_paths(faults, small_pool, case, tmp_path):
    run_case(faults, case, small_pool, tmp=tmp_path)


def test_prefetcher_start_failure_leaves_nothing_behind(faults, small_pool, tmp_path):
    """pthread_create, the buffer's mmap, the mutex or a condition variable failing: pf_start
    returns -errno with a reason, destroys what it initialised, unmaps its buffer, and the
    teardown's pf_stop on it is a no-op."""
    run_case(faults, "pf-start", small_pool, tmp=tmp_path)


def test_count_distinct_allocation_failure_is_a_fail_stop(faults, small_pool, tmp_path):
    """The distinct-expert table failing to allocate ends the run (ok false, exit 1, an
    out-of-memory reason), instead of reporting distinct_experts 0."""
    p = tmp_path / "plan.bpln"
    # geometry of the small_pool fixture (2 layers, 8 experts, 8192 bytes)
    write_plan(p, make_plan([[(0, (1, 2)), (1, (3,))]], 2, 8, 8192))
    run_case(faults, "count-distinct-enomem", small_pool, p, tmp=tmp_path)


def test_probe_errors_decide_skip_or_failure(faults, small_pool, tmp_path):
    """The RWF_DONTCACHE probe failing with EOPNOTSUPP or EINVAL (file system or kernel without
    it) exits 4 with skipped true; EIO or EACCES at the same call exits 1 with skipped false."""
    p = tmp_path / "plan.bpln"
    write_plan(p, make_plan([[(0, (1, 2)), (1, (3,))]], 2, 8, 8192))
    run_case(faults, "probe-exit-codes", small_pool, p, tmp=tmp_path)
