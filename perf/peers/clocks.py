"""GPU clocks for the peers' rows, read the way kernlab reads them (perf/clocks.c): NVML through
ctypes (libnvidia-ml.so.1, opened at run time), the SM clock and the current clock-event
(throttle) reasons of the device torch is using, found by its PCI bus id.

throttled() is kernlab's rule (perf/gate.c, kl_throttled): the SM clock fell by more than 5%
between the readings before and after a row's timing, or the driver reports a slowdown reason
(power cap 0x4, HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, power brake 0x80). Without
NVML both readings are invalid and nothing is marked, as in kernlab.
"""
import ctypes

REASONS = {0x4: "power cap", 0x8: "HW slowdown", 0x20: "SW thermal", 0x40: "HW thermal", 0x80: "power brake"}
MASK = sum(REASONS)
NVML_CLOCK_SM = 1

_lib = None


def _nvml():
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            _lib = lib if lib.nvmlInit_v2() == 0 else False
        except (OSError, AttributeError):
            _lib = False
    return _lib


def _handle(lib, torch, index):
    """NVML's handle of CUDA device `index`: by PCI bus id where torch tells it, else by index."""
    handle = ctypes.c_void_p()
    props = torch.cuda.get_device_properties(index)
    if all(hasattr(props, k) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0".encode()
        if lib.nvmlDeviceGetHandleByPciBusId_v2(bus, ctypes.byref(handle)) == 0:
            return handle
    return handle if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0 else None


def read(torch, index=None):
    """{"valid", "sm_mhz", "reasons"} of CUDA device `index` (default: torch's current one)."""
    lib = _nvml()
    if not lib:
        return {"valid": False}
    handle = _handle(lib, torch, torch.cuda.current_device() if index is None else index)
    sm = ctypes.c_uint(0)
    if handle is None or lib.nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM, ctypes.byref(sm)) != 0:
        return {"valid": False}
    reasons = ctypes.c_ulonglong(0)
    fn = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    if fn is not None:
        fn(handle, ctypes.byref(reasons))
    return {"valid": True, "sm_mhz": sm.value, "reasons": reasons.value}


def throttled(before, after):
    """(throttled, why), as kl_throttled decides it."""
    if not before.get("valid") or not after.get("valid"):
        return False, ""
    reasons = after["reasons"] & MASK
    if not after["sm_mhz"] < 0.95 * before["sm_mhz"] and not reasons:
        return False, ""
    why = f"SM clock {before['sm_mhz']} -> {after['sm_mhz']} MHz"
    return True, why + "".join(f", {name}" for bit, name in REASONS.items() if reasons & bit)


def row_fields(before, after):
    """The results line's fields kernlab writes (kl_clocks_json), with "throttled"."""
    is_throttled, why = throttled(before, after)
    row = {"throttled": is_throttled}
    if before.get("valid") and after.get("valid"):
        row.update(sm_clock_mhz_before=before["sm_mhz"], sm_clock_mhz_after=after["sm_mhz"],
                   clock_event_reasons=after["reasons"])
        if is_throttled:
            row["throttle_why"] = why
    return row
