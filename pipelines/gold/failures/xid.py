"""The NVIDIA Xid catalogue: what each Xid means, and whether it is the system's fault or may be the job's.

Sources (see docs/failures.md): NVIDIA "Xid Errors" listing (docs.nvidia.com/deploy/xid-errors), whose cause
columns (hardware, driver, user application, system memory, bus, thermal, frame buffer) are transcribed in
leptonai/gpud `components/accelerator/nvidia/query/xid/xid.go` (driver r555 listing); NVIDIA Health
Validation "Xid Checks" (Xid 46 and 48 CRITICAL, drain → reset_gpu); NVIDIA GPU debug guidelines as quoted
in stas00/ml-engineering `compute/accelerator/nvidia/debug.md` (Xid 63, 64, 94); NVLink Xid 144-150 as
printed by the driver in the log lines of leptonai/gpud#1174.
"""

from __future__ import annotations

from dataclasses import dataclass

# fault kinds
HARDWARE = "hardware"  # the GPU, its memory, its links or the bus: never the job's fault
DRIVER = "driver"  # driver, firmware or system software: not the job's fault
APPLICATION = "application"  # NVIDIA lists a user-application cause: may be the job's own bug
INFORMATIONAL = "informational"  # a consequence of another error, or a notice: not a root cause


@dataclass(frozen=True)
class Xid:
    """One Xid code: NVIDIA's name for it, its fault kind and what to do."""

    code: int
    name: str
    fault: str
    action: str

    @property
    def is_system_fault(self) -> bool:
        """True when the job could not have caused it (hardware or driver), so the user is not blamed."""
        return self.fault in (HARDWARE, DRIVER)


def _x(code: int, name: str, fault: str, action: str) -> Xid:
    return Xid(code, name, fault, action)


_RESET = "drain the node and reset the GPU; report to admins"
_DEBUG_APP = (
    "debug the application (rerun with CUDA_LAUNCH_BLOCKING=1); if it recurs only on this GPU, report it"
)

XID_CATALOGUE: dict[int, Xid] = {
    x.code: x
    for x in (
        _x(8, "GPU stopped processing", APPLICATION, "restart the application; " + _DEBUG_APP),
        _x(13, "Graphics Engine Exception", APPLICATION, "run DCGM diagnostics; if they pass, " + _DEBUG_APP),
        _x(24, "GPU semaphore timeout", APPLICATION, _DEBUG_APP),
        _x(25, "Invalid or illegal push buffer stream", APPLICATION, _DEBUG_APP),
        _x(31, "GPU memory page fault", APPLICATION, _DEBUG_APP),
        _x(32, "Invalid or corrupted push buffer stream", DRIVER, _RESET),
        _x(38, "Driver firmware error", DRIVER, _RESET),
        _x(43, "GPU stopped processing", APPLICATION, "restart the application; " + _DEBUG_APP),
        _x(44, "Graphics Engine fault during context switch", DRIVER, _RESET),
        _x(
            45,
            "Preemptive cleanup, due to previous errors",
            INFORMATIONAL,
            "look for the Xid that preceded it",
        ),
        _x(
            46,
            "GPU stopped processing",
            DRIVER,
            "drain, reset the GPU; service if it recurs (NVIDIA: CRITICAL)",
        ),
        _x(
            48,
            "Double Bit ECC Error",
            HARDWARE,
            "drain, reset the GPU, run field diagnostics (NVIDIA: CRITICAL)",
        ),
        _x(54, "Auxiliary power is not connected to the GPU board", HARDWARE, _RESET),
        _x(56, "Display Engine error", HARDWARE, _RESET),
        _x(57, "Error programming video memory interface", HARDWARE, _RESET),
        _x(58, "Unstable video memory interface detected", HARDWARE, _RESET),
        _x(
            61, "Internal micro-controller breakpoint/warning", DRIVER, "report a GPU issue and reset the GPU"
        ),
        _x(62, "Internal micro-controller halt", HARDWARE, "report a GPU issue and reset the GPU"),
        _x(
            63,
            "ECC page retirement or row remapping recording event",
            HARDWARE,
            "reset the GPU to activate the remap",
        ),
        _x(
            64,
            "ECC page retirement or row remapper recording failure",
            HARDWARE,
            "reboot the node now; RMA if it recurs",
        ),
        _x(68, "NVDEC0 Exception", HARDWARE, _RESET),
        _x(69, "Graphics Engine class error", HARDWARE, _RESET),
        _x(
            74,
            "NVLink Error",
            HARDWARE,
            "check and reseat the NVLink connection; report if it recurs on the link",
        ),
        _x(79, "GPU has fallen off the bus", HARDWARE, "drain the node and report a GPU issue"),
        _x(80, "Corrupted data sent to GPU", HARDWARE, _RESET),
        _x(81, "VGA Subsystem Error", HARDWARE, _RESET),
        _x(92, "High single-bit ECC error rate", HARDWARE, "run field diagnostics; RMA on excessive errors"),
        _x(93, "Non-fatal violation of provisioned InfoROM wear limit", INFORMATIONAL, "none for the job"),
        _x(94, "Contained ECC error", HARDWARE, "restart the application; reset the GPU when convenient"),
        _x(
            95,
            "Uncontained ECC error",
            HARDWARE,
            "reboot the node (or reset the GPU with MIG); report if it recurs",
        ),
        _x(109, "Context Switch Timeout Error", APPLICATION, _DEBUG_APP),
        _x(110, "Security Fault Error", HARDWARE, _RESET),
        _x(119, "GSP RPC Timeout", HARDWARE, "reset the GPU; report if it recurs"),
        _x(120, "GSP Error", HARDWARE, "reset the GPU; report if it recurs"),
        _x(121, "C2C Link Error", HARDWARE, _RESET),
        _x(122, "SPI PMU RPC Read Failure", HARDWARE, _RESET),
        _x(123, "SPI PMU RPC Write Failure", HARDWARE, _RESET),
        _x(124, "SPI PMU RPC Erase Failure", HARDWARE, _RESET),
        _x(125, "Inforom FS Failure", HARDWARE, _RESET),
        _x(140, "Unrecovered ECC Error", HARDWARE, "reset the GPU; report if it recurs"),
        _x(143, "GPU Initialization Failure", HARDWARE, _RESET),
        *(
            _x(code, "NVLink error event (Blackwell)", HARDWARE, "check the NVLink fabric; report to admins")
            for code in range(144, 151)
        ),
        _x(154, "GPU recovery action changed", INFORMATIONAL, "follow the recovery action the driver names"),
    )
}

SYSTEM_FAULT_XIDS: tuple[int, ...] = tuple(sorted(c for c, x in XID_CATALOGUE.items() if x.is_system_fault))
APPLICATION_XIDS: tuple[int, ...] = tuple(
    sorted(c for c, x in XID_CATALOGUE.items() if x.fault == APPLICATION)
)


def describe(code: int) -> Xid:
    """The catalogue entry for an Xid; an unlisted code is reported as unknown and not blamed on anyone."""
    return XID_CATALOGUE.get(
        code, Xid(code, "not in the catalogue", INFORMATIONAL, "look it up in NVIDIA's Xid list")
    )


def codes_regex(codes: tuple[int, ...]) -> str:
    """A regex alternation matching exactly these codes as whole numbers (longest first)."""
    return "(?:" + "|".join(str(c) for c in sorted(codes, key=lambda c: -len(str(c)))) + ")"
