-- A stub `slurm` table for running jobfit's hooks in a plain Lua 5.4 (tests/test_slurm_hooks.py).
-- Usage: lua5.4 harness.lua HOOK.lua SCENARIO.lua — loads the hook, then runs the scenario, which
-- calls the hook's functions and reports with out(key, value); every log call is printed last as
-- `log<TAB>level<TAB>message`.
LOG = {}
local function logger(level)
    return function(fmt, ...)
        LOG[#LOG + 1] = level .. "\t" .. string.format(fmt, ...)
    end
end
slurm = {
    SUCCESS = 0,
    ERROR = -1,
    NO_VAL16 = 0xfffe,
    NO_VAL = 0xfffffffe,
    NO_VAL64 = 0xfffffffffffffffe,
    log_user = logger("user"),
    log_info = logger("info"),
    log_error = logger("error"),
    log_debug = logger("debug"),
    log_verbose = logger("verbose"),
}

function out(key, value)
    print(key .. "=" .. tostring(value))
end

out("load_rc", dofile(arg[1]))
dofile(arg[2])
for _, line in ipairs(LOG) do
    print("log\t" .. line)
end
