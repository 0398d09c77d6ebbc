--[[ jobfit cli_filter.lua: right-sizing advice in sbatch/salloc/srun on the login node (Slurm cli_filter/lua).

Install: see docs/hooks.md (slurm.conf `CliFilterPlugins=lua`; this file as cli_filter.lua beside
slurm.conf). Before a job is submitted, slurm_cli_pre_submit POSTs the job description to
`jobfit serve`'s /v1/recommend with curl (hard timeout: JOBFIT_CLI.timeout_s, at most 1 s in all) and prints
the answer's flags to the user with slurm.log_info. With the job script (sbatch's script file, `--wrap`'s
command, srun's command) it first asks /v1/workload/files which files the script's entry points name, reads
those it may (bounded: 8 files, 256 KiB each, 512 KiB in all, named literally in the script, .py/.yaml/.yml/
.json, relative to --chdir or the working directory) and sends script and files for the code-aware VRAM
estimate; a job that will not fit the requested card is told so. It never changes an option and it fails
open: a server that is down, slow or answers nonsense, or a file it cannot read, means less or no advice,
and the submission goes on (slurm.SUCCESS is returned whatever happens; cli_filter is client-side, so it
is advice, not policy — enforcement belongs to job_submit.lua).
]]

-- Settings: edit here. (A global table so that tests can point it elsewhere.)
JOBFIT_CLI = {
    url = "http://127.0.0.1:8080/v1/recommend",
    -- The cluster name jobfit knows this cluster by (`--cluster` of `jobfit train`).
    cluster = "demo",
    -- curl's whole-transfer limit in seconds (connect included); keep it at most 1.
    timeout_s = 1,
    curl = "curl",
    -- Set a token here only if `jobfit serve` requires one (a bearer token; readable by all users).
    token = nil,
    -- Where to ask which files the job script's entry points name (nil: `url` with /v1/recommend
    -- replaced by /v1/workload/files).
    files_url = nil,
    -- What is read and sent (features/workload.py's bounds; the server's own bounds apply when smaller).
    max_script_bytes = 512 * 1024,
    max_files = 8,
    max_file_bytes = 256 * 1024,
    max_total_bytes = 512 * 1024,
    -- The server refuses bodies over 1 MiB: over this, the files (then the script) are left out.
    max_body_bytes = 1024 * 1024 - 4096,
}

local function json_string(s)
    return '"' .. string.gsub(tostring(s), '[%c"\\]', function(c)
        local named = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r" }
        return named[c] or string.format("\\u%04x", string.byte(c))
    end) .. '"'
end

local function json_object(fields, order)
    local parts = {}
    for _, k in ipairs(order) do
        local v = fields[k]
        if v ~= nil then
            local text
            if type(v) == "number" then
                text = string.format("%d", v)
            elseif type(v) == "table" then
                text = v.json -- already encoded
            else
                text = json_string(v)
            end
            parts[#parts + 1] = json_string(k) .. ":" .. text
        end
    end
    return "{" .. table.concat(parts, ",") .. "}"
end

-- A small JSON reader (objects, arrays, strings, numbers, true/false/null); errors on anything else.
local function decode(text)
    local pos = 1
    local value
    local function ws()
        pos = string.find(text, "[^ \t\r\n]", pos) or #text + 1
    end
    local function str()
        local out = {}
        pos = pos + 1
        while true do
            local c = string.sub(text, pos, pos)
            if c == "" then
                error("unterminated string")
            elseif c == '"' then
                pos = pos + 1
                return table.concat(out)
            elseif c == "\\" then
                local e = string.sub(text, pos + 1, pos + 1)
                local map = { n = "\n", t = "\t", r = "\r", b = "\b", f = "\f", ["/"] = "/", ["\\"] = "\\", ['"'] = '"' }
                if e == "u" then
                    local code = tonumber(string.sub(text, pos + 2, pos + 5), 16) or error("bad \\u escape")
                    out[#out + 1] = utf8.char(code)
                    pos = pos + 6
                else
                    out[#out + 1] = map[e] or error("bad escape")
                    pos = pos + 2
                end
            else
                out[#out + 1] = c
                pos = pos + 1
            end
        end
    end
    function value()
        ws()
        local c = string.sub(text, pos, pos)
        if c == "{" then
            local obj = {}
            pos = pos + 1
            ws()
            if string.sub(text, pos, pos) == "}" then
                pos = pos + 1
                return obj
            end
            while true do
                ws()
                if string.sub(text, pos, pos) ~= '"' then
                    error("expected a key")
                end
                local k = str()
                ws()
                if string.sub(text, pos, pos) ~= ":" then
                    error("expected ':'")
                end
                pos = pos + 1
                obj[k] = value()
                ws()
                local d = string.sub(text, pos, pos)
                pos = pos + 1
                if d == "}" then
                    return obj
                elseif d ~= "," then
                    error("expected ',' or '}'")
                end
            end
        elseif c == "[" then
            local arr = {}
            pos = pos + 1
            ws()
            if string.sub(text, pos, pos) == "]" then
                pos = pos + 1
                return arr
            end
            while true do
                arr[#arr + 1] = value()
                ws()
                local d = string.sub(text, pos, pos)
                pos = pos + 1
                if d == "]" then
                    return arr
                elseif d ~= "," then
                    error("expected ',' or ']'")
                end
            end
        elseif c == '"' then
            return str()
        end
        for word, v in pairs({ ["true"] = true, ["false"] = false, ["null"] = false }) do
            if string.sub(text, pos, pos + #word - 1) == word then
                pos = pos + #word
                return v
            end
        end
        local number = string.match(text, "^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
        if not number or number == "" then
            error("unexpected character at " .. pos)
        end
        pos = pos + #number
        return tonumber(number) or error("bad number")
    end
    local result = value()
    ws()
    if pos <= #text then
        error("trailing characters")
    end
    return result
end
JOBFIT_CLI.decode = decode

-- Slurm memory option ("4G", "500", "1T") to MiB; nil when absent or unreadable.
local function mem_mb(text)
    local n, unit = string.match(tostring(text or ""), "^(%d+%.?%d*)([KkMmGgTt]?)[Bb]?$")
    if not n then
        return nil
    end
    local scale = { k = 1 / 1024, m = 1, g = 1024, t = 1024 * 1024 }
    return math.ceil(tonumber(n) * (scale[string.lower(unit)] or 1))
end

-- Slurm time option ("MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS") to minutes.
local function time_min(text)
    text = tostring(text or "")
    local d, rest = string.match(text, "^(%d+)%-(.+)$")
    local parts = {}
    for p in string.gmatch(rest or text, "[^:]+") do
        if not string.match(p, "^%d+$") then
            return nil
        end
        parts[#parts + 1] = tonumber(p)
    end
    local h, m, s = 0, 0, 0
    if d then
        h, m, s = parts[1] or 0, parts[2] or 0, parts[3] or 0
    elseif #parts == 1 then
        m = parts[1]
    elseif #parts == 2 then
        m, s = parts[1], parts[2]
    elseif #parts == 3 then
        h, m, s = parts[1], parts[2], parts[3]
    else
        return nil
    end
    return (tonumber(d) or 0) * 1440 + h * 60 + m + math.ceil(s / 60)
end
JOBFIT_CLI.mem_mb, JOBFIT_CLI.time_min = mem_mb, time_min

local function opt(options, name)
    local v = options[name]
    if v == nil or v == "" or v == false then
        return nil
    end
    return v
end

local function login_name()
    local pipe = io.popen("id -un 2>/dev/null", "r")
    local name = pipe and pipe:read("l")
    if pipe then
        pipe:close()
    end
    return name
end

-- The /v1/recommend body (models/serving/schemas.py RecommendRequest; unknown fields are refused there):
-- sbatch's options as the user gave them, memory normalised to MiB ("65536M") and time to minutes; the
-- job script text and {name as the script names it: text} of the files read, when there are any.
local function request_body(options, script, sources)
    local mem = mem_mb(opt(options, "mem"))
    local mem_per_cpu = mem_mb(opt(options, "mem-per-cpu"))
    local minutes = time_min(opt(options, "time"))
    local gres = opt(options, "gres") or (opt(options, "gpus") and ("gpu:" .. options["gpus"]))
    local function count(name)
        local n = tonumber(opt(options, name) or "")
        return n and n >= 1 and math.floor(n) or nil
    end
    return json_object({
        cluster = JOBFIT_CLI.cluster,
        user = os.getenv("USER") or os.getenv("LOGNAME") or login_name(),
        partition = opt(options, "partition"),
        account = opt(options, "account"),
        nodes = count("nodes"),
        ntasks = count("ntasks"),
        cpus_per_task = count("cpus-per-task"),
        mem_per_node = mem and (mem .. "M") or nil,
        mem_per_cpu = (not mem) and mem_per_cpu and (mem_per_cpu .. "M") or nil,
        time_limit = minutes and tostring(math.max(minutes, 1)) or nil,
        gres = gres,
        job_name = opt(options, "job-name"),
        script = script,
        sources = sources,
    }, { "cluster", "user", "partition", "account", "nodes", "ntasks", "cpus_per_task", "mem_per_node",
         "mem_per_cpu", "time_limit", "gres", "job_name", "script", "sources" })
end

local function shell_quote(s)
    return "'" .. string.gsub(tostring(s), "'", "'\\''") .. "'"
end

-- POST the body with at most `timeout` seconds for the whole transfer; returns the decoded answer (or nil
-- and why), the seconds curl spent and the HTTP status (nil when no answer came: down, refused, too slow).
local function post(url, body, timeout)
    local tmp = os.tmpname()
    local fh = assert(io.open(tmp, "wb"))
    fh:write(body)
    fh:close()
    local limit = string.format("%.3f", timeout)
    local cmd = string.format(
        "%s -sS -m %s --connect-timeout %s -X POST -H 'Content-Type: application/json' %s--data-binary @%s -w '\\n%%{http_code} %%{time_total}' %s 2>/dev/null",
        JOBFIT_CLI.curl, limit, limit,
        JOBFIT_CLI.token and ("-H " .. shell_quote("Authorization: Bearer " .. JOBFIT_CLI.token) .. " ") or "",
        shell_quote(tmp), shell_quote(url)
    )
    local pipe = io.popen(cmd, "r")
    local out = pipe and pipe:read("a") or ""
    if pipe then
        pipe:close()
    end
    os.remove(tmp)
    local payload, code, spent = string.match(out, "^(.*)\n(%d%d%d) ([%d%.,]+)$")
    spent = tonumber(spent and (string.gsub(spent, ",", ".")) or "") or timeout
    if code ~= "200" then
        return nil, "no answer (HTTP " .. tostring(code) .. ")", spent, code ~= "000" and code or nil
    end
    local ok, answer = pcall(decode, payload)
    if not ok or type(answer) ~= "table" then
        return nil, "malformed answer", spent, code
    end
    return answer, nil, spent, code
end

local function log_debug(fmt, ...)
    if slurm.log_debug then
        pcall(slurm.log_debug, fmt, ...)
    end
end

-- A file's text if it is readable, at most `limit` bytes and UTF-8 (JSON carries text); else nil and why.
local function read_text(path, limit)
    local fh = io.open(path, "rb")
    if not fh then
        return nil, "unreadable"
    end
    local ok, data, err = pcall(fh.read, fh, limit + 1)
    fh:close()
    if not ok or (data == nil and err ~= nil) then
        return nil, "unreadable"
    end
    data = data or ""
    if #data > limit then
        return nil, "over " .. limit .. " bytes"
    end
    if not utf8.len(data) then
        return nil, "not UTF-8 text"
    end
    return data
end
JOBFIT_CLI.read_text = read_text

local function word_quote(w)
    if string.match(w, "^[%w%._/=:,@%+%-]+$") then
        return w
    end
    return shell_quote(w)
end

-- The job script as the job will run it: sbatch's `--wrap` command (wrapped as sbatch wraps it), else
-- the script file sbatch names (options.argv[1], relative to where sbatch runs), else srun's command
-- line. nil when there is none (a script on stdin, salloc) or it is too large or not text.
local function job_script(options)
    local wrap = opt(options, "wrap")
    if wrap then
        return "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n" .. wrap .. "\n"
    end
    local argv = options.argv
    if type(argv) ~= "table" or type(argv[1]) ~= "string" or argv[1] == "" then
        return nil
    end
    if options.type == "srun" then
        local words = {}
        for i, w in ipairs(argv) do
            words[i] = word_quote(tostring(w))
        end
        local text = "#!/bin/sh\n" .. table.concat(words, " ") .. "\n"
        return #text <= JOBFIT_CLI.max_script_bytes and text or nil
    end
    return (read_text(argv[1], JOBFIT_CLI.max_script_bytes))
end
JOBFIT_CLI.job_script = job_script

-- Worth asking which files it names: the script mentions a launcher features/workload.py knows.
local function names_a_workload(script)
    for _, word in ipairs({ "python", "torchrun", "accelerate", "deepspeed", "litgpt", ".py" }) do
        if string.find(script, word, 1, true) then
            return true
        end
    end
    return false
end

-- A name the hook will read: as the script itself names it (so a server cannot ask for any other file),
-- a Python or YAML/JSON config, one line.
local function readable_name(name, script)
    return type(name) == "string" and #name > 0 and #name <= 512 and not string.find(name, "%c")
        and (string.find(name, "%.py$") or string.find(name, "%.ya?ml$") or string.find(name, "%.json$"))
        and string.find(script, name, 1, true) ~= nil
end

-- Read the files the server named, within the bounds; returns the `sources` JSON object (nil: none read).
local function read_sources(script, wanted, base)
    local function bound(name)
        return math.min(JOBFIT_CLI[name], tonumber(wanted[name]) or JOBFIT_CLI[name])
    end
    local max_files, max_file, max_total = bound("max_files"), bound("max_file_bytes"), bound("max_total_bytes")
    local parts, seen, total = {}, {}, 0
    for _, name in ipairs(type(wanted.files) == "table" and wanted.files or {}) do
        if #parts >= max_files then
            break
        end
        if not seen[name] and readable_name(name, script) then
            seen[name] = true
            local path = (string.sub(name, 1, 1) == "/" or not base) and name or (base .. "/" .. name)
            local text, why = read_text(path, max_file)
            if text and total + #text > max_total then
                text, why = nil, "over the " .. max_total .. " bytes in all"
            end
            if text then
                parts[#parts + 1] = json_string(name) .. ":" .. json_string(text)
                total = total + #text
            else
                log_debug("jobfit: %s not sent: %s", name, why)
            end
        end
    end
    return #parts > 0 and { json = "{" .. table.concat(parts, ",") .. "}" } or nil
end

local function gib(bytes)
    return string.format("%.1f GiB", bytes / 1073741824)
end

-- "It will not fit" from the answer's code_estimate (docs/vram.md), with up to 3 changes that fit.
local function will_not_fit(code)
    if type(code) ~= "table" or code.status ~= "ok" or code.fits ~= false then
        return nil
    end
    local peak, card = tonumber(code.peak_vram_bytes), tonumber(code.gpu_mem_bytes)
    if not peak or not card then
        return nil
    end
    local line = string.format("jobfit: this job will not fit one %s: its code and config need about %s per GPU, the card has %s",
        tostring(code.gpu_model), gib(peak), gib(card))
    local changes = {}
    for _, c in ipairs(type(code.changes_that_fit) == "table" and code.changes_that_fit or {}) do
        if #changes >= 3 then
            break
        end
        if type(c) == "table" and type(c.what) == "string" then
            local p = tonumber(c.peak_vram_bytes)
            changes[#changes + 1] = c.what .. (p and (" (" .. gib(p) .. ")") or "")
        end
    end
    if #changes > 0 then
        line = line .. "; fits with: " .. table.concat(changes, "; ")
    end
    return line
end

local function flag_list(answer)
    local flags = {}
    for _, f in ipairs(type(answer.flags) == "table" and answer.flags or {}) do
        if type(f) == "string" then
            flags[#flags + 1] = f
        end
    end
    return flags
end

local function advise(options)
    local budget = math.min(tonumber(JOBFIT_CLI.timeout_s) or 1, 1)
    local ok, script = pcall(job_script, options)
    script = ok and script or nil
    local sources
    if script and names_a_workload(script) then
        local url = JOBFIT_CLI.files_url or string.gsub(JOBFIT_CLI.url, "/v1/recommend$", "/v1/workload/files")
        local wanted, why, spent, code = post(url, json_object({ script = script }, { "script" }), budget)
        if not code then -- nothing answered within the time: no advice at all (the submission goes on)
            log_debug("jobfit: %s", why)
            return
        end
        budget = budget - spent
        if wanted then
            local base = opt(options, "chdir")
            local read_ok, read = pcall(read_sources, script, wanted, base and tostring(base))
            sources = read_ok and read or nil
        end
    end
    if budget < 0.05 then
        log_debug("jobfit: no time left for advice")
        return
    end
    local body = request_body(options, script, sources)
    if #body > JOBFIT_CLI.max_body_bytes then
        body = request_body(options, script, nil)
        if #body > JOBFIT_CLI.max_body_bytes then
            body = request_body(options, nil, nil)
        end
    end
    local answer, why = post(JOBFIT_CLI.url, body, budget)
    if not answer then
        log_debug("jobfit: %s", why)
        return
    end
    if answer.status == "ok" and type(answer.flags) == "table" and #answer.flags > 0 then
        local line = "jobfit: from " .. tostring(math.tointeger(answer.history_jobs) or "your") .. " finished jobs, this job needs about: #SBATCH " .. table.concat(flag_list(answer), " ")
        local saving = type(answer.expected_saving) == "table" and tonumber(answer.expected_saving.usd)
        if saving and saving > 0 then
            line = line .. string.format(" (saves about $%.2f per run)", saving)
        end
        slurm.log_info("%s", line)
    elseif answer.status == "not_enough_history" and type(answer.flags) == "table" and #flag_list(answer) > 0 then
        slurm.log_info("%s", "jobfit: too little history; from its code and config, this job needs about: #SBATCH " .. table.concat(flag_list(answer), " "))
    end
    local verdict = will_not_fit(answer.code_estimate)
    if verdict then
        slurm.log_info("%s", verdict)
    end
end

function slurm_cli_setup_defaults(options, early)
    return slurm.SUCCESS
end

-- An srun inside an allocation (a batch script's steps, srun under salloc, `srun --jobid`) starts a step of
-- a job already sized and running: nothing to advise, and no request to delay each step with.
local function is_a_step(options)
    if options.type ~= "srun" then
        return false
    end
    local jobid = opt(options, "jobid") -- Slurm's getter reads "unset" when --jobid was not given
    if jobid ~= nil and jobid ~= "unset" then
        return true
    end
    return (os.getenv("SLURM_JOB_ID") or os.getenv("SLURM_JOBID") or "") ~= ""
end

function slurm_cli_pre_submit(options, pack_offset)
    if is_a_step(options) then
        return slurm.SUCCESS
    end
    local ok, err = pcall(advise, options)
    if not ok then
        log_debug("jobfit: advice skipped: %s", tostring(err))
    end
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
    return slurm.SUCCESS
end

return slurm.SUCCESS
