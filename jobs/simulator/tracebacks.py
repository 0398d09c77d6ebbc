"""Python tracebacks for the simulator's failure logs, in the forms job logs carry them, and the user's frame.

Written from templates of what CPython, torch, torchrun, srun and DataLoader print, independently of the
reader in pipelines/gold/failures/tracebacks.py (nothing is imported from it): the simulator says where the
user's code is, the reader has to find it. A few forms are ones the reader is known to miss (a library copied
into the project folder under a name its layout table lacks), so the measured share is not 100 % by design.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class UserFrame:
    """The innermost frame of the user's own code, as the log prints it."""

    file: str
    line: int
    function: str
    text: str


@dataclass(frozen=True)
class Call:
    """One frame to print: file, function, source text; `user` when it is the job owner's code."""

    file: str
    function: str
    text: str
    user: bool


PY_VERSIONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13")
# Where the installed packages live, by environment style ({u} user, {p} project, {py} Python version).
SITE_DIRS = (
    "/home/{u}/.conda/envs/{p}/lib/python{py}/site-packages",
    "/home/{u}/{p}/.venv/lib/python{py}/site-packages",
    "/usr/local/lib/python{py}/dist-packages",
    "/opt/conda/lib/python{py}/site-packages",
    "/sw/easybuild/software/PyTorch/2.3.0-foss-2023b-CUDA-12.4.0/lib/python{py}/site-packages",
)
STDLIB_DIRS = (
    "/usr/lib/python{py}",
    "/home/{u}/.conda/envs/{p}/lib/python{py}",
    "/opt/python/{py}.4/lib/python{py}",
)
# Where the user's project sits and how the script is named in a frame.
PROJECT_DIRS = ("/home/{u}/{p}", "/scratch/{u}/{p}", "/gpfs/projects/{a}/{u}/{p}", "", ".")
# Libraries copied into the project folder: a known layout (reader's table has it) and one it lacks.
VENDORED = (
    ("third_party/deepspeed/runtime/engine.py", "forward"),
    ("external/flash_attn/flash_attn_interface.py", "flash_attn_func"),
)

# Library frames below the user's call, innermost last, by failure.
LIBRARY_STACKS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "gpu_oom": (
        ("torch/nn/modules/module.py", "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
        ("torch/nn/modules/module.py", "_call_impl", "return forward_call(*args, **kwargs)"),
        ("transformers/models/llama/modeling_llama.py", "forward", "hidden_states = self.mlp(hidden_states)"),
        ("torch/nn/modules/linear.py", "forward", "return F.linear(input, self.weight, self.bias)"),
    ),
    "backward": (
        ("torch/_tensor.py", "backward", "torch.autograd.backward("),
        ("torch/autograd/__init__.py", "backward", "_engine_run_backward("),
        (
            "torch/autograd/graph.py",
            "_engine_run_backward",
            "return Variable._execution_engine.run_backward(",
        ),
    ),
    "file_not_found": (
        ("pandas/io/parquet.py", "read_parquet", "return impl.read("),
        ("pandas/io/parquet.py", "read", "path_or_handle, handles, filesystem = _get_path_or_handle("),
        ("pandas/io/common.py", "get_handle", "handle = open(handle, ioargs.mode)"),
    ),
    "nccl_error": (
        ("torch/distributed/c10d_logger.py", "wrapper", "return func(*args, **kwargs)"),
        ("torch/distributed/distributed_c10d.py", "all_reduce", "work = group.allreduce([tensor], opts)"),
    ),
    "cuda_error": (("torch/_tensor.py", "item", "return self._item()"),),
    "dataloader": (
        ("torch/utils/data/dataloader.py", "__next__", "data = self._next_data()"),
        ("torch/utils/data/dataloader.py", "_next_data", "return self._process_data(data)"),
        ("torch/utils/data/dataloader.py", "_process_data", "data.reraise()"),
        ("torch/_utils.py", "reraise", "raise exception"),
    ),
    "worker": (
        ("torch/utils/data/_utils/worker.py", "_worker_loop", "data = fetcher.fetch(index)"),
        (
            "torch/utils/data/_utils/fetch.py",
            "fetch",
            "data = [self.dataset[idx] for idx in possibly_batched_index]",
        ),
    ),
}


def _user_calls(script: str, kind: str, rng: random.Random) -> list[tuple[str, str, str]]:
    """The user's own frames from the entry point inward: (relative file, function, source text)."""
    if kind in ("dl_train", "notebook"):
        return [
            (script, "<module>", "main()"),
            (script, "main", rng.choice(("trainer.train()", "train(model, loader, optimizer, args)"))),
            (
                "src/engine.py",
                "train_one_epoch",
                rng.choice(("outputs = model(**batch)", "loss = criterion(model(x), y)")),
            ),
        ]
    if kind == "dl_infer":
        return [
            (script, "<module>", "main(parse_args())"),
            ("lib/infer.py", "run_batch", "logits = model(input_ids)"),
        ]
    return [(script, "<module>", "run(args)"), ("pipeline/steps.py", "load_shard", "df = load(path)")]


class Renderer:
    """Draws one traceback's form (Python version, paths, launcher, prefixes) and prints it."""

    def __init__(self, rng: random.Random, user: str, account: str, project: str) -> None:
        self.rng = rng
        self.py = rng.choice(PY_VERSIONS)
        self.minor = int(self.py.split(".")[1])
        fill = {"u": user, "p": project, "a": account, "py": self.py}
        self.site = rng.choice(SITE_DIRS).format(**fill)
        self.stdlib = rng.choice(STDLIB_DIRS).format(**fill)
        self.project = rng.choice(PROJECT_DIRS).format(**fill)
        self.lines_seen: dict[tuple[str, str], int] = {}

    def user_path(self, rel: str) -> str:
        """A project file as a frame prints it (absolute, relative or ./-relative)."""
        if self.project in ("", "."):
            return rel if self.project == "" else f"./{rel}"
        return f"{self.project}/{rel}"

    def line_no(self, file: str, function: str) -> int:
        """A stable line number per (file, function) within one traceback."""
        key = (file, function)
        if key not in self.lines_seen:
            self.lines_seen[key] = self.rng.randint(12, 2400)
        return self.lines_seen[key]

    def frames(self, calls: list[Call]) -> list[str]:
        """`File …` lines with their source text, carets (3.11+) and elisions (3.13) as the version prints."""
        out = []
        for c in calls:
            out.append(f'  File "{c.file}", line {self.line_no(c.file, c.function)}, in {c.function}')
            if c.file.startswith("<frozen"):
                continue
            out.append(f"    {c.text}")
            if self.minor >= 11 and self.rng.random() < 0.5 and not c.text.endswith("("):
                width = max(1, len(c.text) - c.text.find("=") - 2 if "=" in c.text else len(c.text))
                tilde = "~" * (width // 2) if self.minor >= 13 else "^" * (width // 2)
                out.append("    " + " " * (len(c.text) - width) + tilde + "^" * (width - width // 2))
            if self.minor >= 13 and c.text.endswith("(") and self.rng.random() < 0.5:
                out += ["        args=args,", f"    ...<{self.rng.randint(2, 6)} lines>...", "    )"]
        return out

    def library(self, stack: str) -> list[Call]:
        """Installed-library frames of one LIBRARY_STACKS entry."""
        return [Call(f"{self.site}/{f}", fn, text, False) for f, fn, text in LIBRARY_STACKS[stack]]


def render(
    rng: random.Random,
    *,
    user: str,
    account: str,
    script: str,
    kind: str,
    failure: str,
    exception: list[str],
    ranks: int,
) -> tuple[list[str], UserFrame | None]:
    """A failure's traceback in one of the forms job logs show, and the user's innermost frame in it.
    `failure` picks the library stack under the user's code (gpu_oom, backward, file_not_found, nccl_error,
    cuda_error, import, assertion, worker_assertion); `exception`: the exception line and what follows."""
    r = Renderer(rng, user, account, rng.choice(("llm-ft", "vision", "md-prep", "thesis", "proj")))
    calls = [Call(r.user_path(f), fn, t, True) for f, fn, t in _user_calls(script, kind, rng)]
    quoted: list[str] = []
    if (
        failure == "import"
    ):  # at start-up: the script imports the project's module, which imports the missing one
        line = exception[0]  # "No module named 'x'", "... from 'x' ...", or "libx.so.1: cannot open ..."
        module = (
            line.split("'")[1] if "'" in line else line.split(": ")[1].split(".so")[0].removeprefix("lib")
        )
        calls = [calls[0], Call(r.user_path("models/__init__.py"), "<module>", f"import {module}", True)]
    elif failure == "assertion":
        calls.append(
            Call(
                r.user_path("models/blocks.py"),
                "forward",
                "assert x.shape[-1] == self.hidden_size, x.shape",
                True,
            )
        )
    elif failure == "worker_assertion":
        calls += r.library("dataloader")
        worker = [
            *r.library("worker"),
            Call(r.user_path("data/dataset.py"), "__getitem__", "assert len(tokens) <= self.max_len", True),
        ]
        quoted = [
            "Original Traceback (most recent call last):",
            *r.frames(worker),
            exception[0].split(":")[0],
        ]
        exception = [f"{exception[0].split(':')[0]}: Caught AssertionError in DataLoader worker process 0."]
    else:
        stack = {"gpu_oom": "gpu_oom", "backward": "backward", "file_not_found": "file_not_found"}.get(
            failure, failure
        )
        if failure == "gpu_oom" and rng.random() < 0.06:
            # a library copied into the project: inside the project folder, but not the user's code
            rel, fn = rng.choice(VENDORED)
            calls.append(Call(r.user_path(rel), fn, "out = self.module(*inputs, **kwargs)", False))
        calls += r.library(stack)
    if rng.random() < 0.2:  # python -m pkg.train: runpy frames first
        runpy = [
            Call("<frozen runpy>", "_run_module_as_main", "", False),
            Call("<frozen runpy>", "_run_code", "", False),
        ]
        calls = [*runpy, *calls]
    body = ["Traceback (most recent call last):", *r.frames(calls), *exception, *quoted]
    user = [c for c in calls if c.user]
    if failure == "worker_assertion":
        user = [
            Call(r.user_path("data/dataset.py"), "__getitem__", "assert len(tokens) <= self.max_len", True)
        ]
    innermost = user[-1] if user else None
    frame = (
        UserFrame(
            innermost.file, r.line_no(innermost.file, innermost.function), innermost.function, innermost.text
        )
        if innermost
        else None
    )
    if rng.random() < 0.15:  # a non-fatal traceback printed earlier by a destructor
        body = [
            "Exception ignored in: <function _ConnectionBase.__del__ at 0x7f3a2c1e8ca0>",
            "Traceback (most recent call last):",
            f'  File "{r.stdlib}/multiprocessing/connection.py", line 132, in __del__',
            "    self._close()",
            "OSError: [Errno 9] Bad file descriptor",
            *body,
        ]
    return _dress(r, body, ranks), frame


def _dress(r: Renderer, body: list[str], ranks: int) -> list[str]:
    """The traceback as the launcher writes it: plain, [rankN]: prefixes (two ranks, maybe line-interleaved,
    then torchrun's summary), srun --label prefixes, or timestamps; sometimes glued to a progress bar."""
    rng = r.rng
    form = (
        rng.choice(("plain", "plain", "timestamp", "torchrun", "srun"))
        if ranks > 1
        else rng.choice(("plain", "timestamp"))
    )
    if form == "timestamp":
        body = [f"Nov 03 02:14:{i % 60:02d} {line}" for i, line in enumerate(body)]
    elif form == "srun":
        body = [f"0: {line}" for line in body]
    elif form == "torchrun":
        first, second = rng.sample(range(ranks), 2) if ranks > 1 else (0, 1)
        a = [f"[rank{first}]: {line}" for line in body]
        b = [f"[rank{second}]: {line}" for line in body]
        # two ranks writing at once interleave line by line; otherwise one after the other
        merged = [x for pair in zip(a, b, strict=True) for x in pair] if rng.random() < 0.5 else a + b
        launcher = [
            "Traceback (most recent call last):",
            f'  File "{r.site.rsplit("/lib/", 1)[0]}/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            f'  File "{r.site}/torch/distributed/run.py", line 919, in main',
            "    run(args)",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "============================================================",
            "train.py FAILED",
            "------------------------------------------------------------",
            "Root Cause (first observed failure):",
            "[0]:",
            "  time      : 2026-11-03_02:14:05",
            "  host      : g012",
            f"  rank      : {first} (local_rank: {first})",
            "  exitcode  : 1 (pid: 41234)",
            "  error_file: <N/A>",
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
            "============================================================",
        ]
        body = merged + launcher
    if rng.random() < 0.3:
        body[0] = f" 12%|#2        | 120/1000 [02:11<16:02,  1.09s/it]{body[0]}"
    return body
