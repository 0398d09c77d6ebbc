--[[ jobfit cli_filter.lua: right-sizing advice in sbatch/salloc/srun on the login node (Slurm cli_filter/lua).

Install: see docs/hooks.md (slurm.conf `CliFilterPlugins=lua`; this file as cli_filter.lua beside
slurm.conf). Before a job is submitted, slurm_cli_pre_submit POSTs the job description to
`jobfit serve`'s /v1/recommend with curl (hard timeout: JOBFIT_CLI.timeout_s, at most 1 s) and prints
the answer's flags to the user with slurm.log_info. It never changes an option and it fails open: a
server that is down, slow or answers nonsense means no advice, and the submission goes on
(slurm.SUCCESS is returned whatever happens; cli_filter is client-side, so it is advice, not policy —
enforcement belongs to job_submit.lua).
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
            parts[#parts + 1] = json_string(k) .. ":" .. (type(v) == "number" and string.format("%d", v) or json_string(v))
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
-- sbatch's options as the user gave them, memory normalised to MiB ("65536M") and time to minutes.
local function request_body(options)
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
    }, { "cluster", "user", "partition", "account", "nodes", "ntasks", "cpus_per_task", "mem_per_node",
         "mem_per_cpu", "time_limit", "gres", "job_name" })
end

local function shell_quote(s)
    return "'" .. string.gsub(tostring(s), "'", "'\\''") .. "'"
end

-- POST the body; returns the decoded answer, or nil and why.
local function post(body)
    local tmp = os.tmpname()
    local fh = assert(io.open(tmp, "wb"))
    fh:write(body)
    fh:close()
    local timeout = math.min(tonumber(JOBFIT_CLI.timeout_s) or 1, 1)
    local cmd = string.format(
        "%s -sS -m %s --connect-timeout %s -X POST -H 'Content-Type: application/json' %s--data-binary @%s -w '\\n%%{http_code}' %s 2>/dev/null",
        JOBFIT_CLI.curl, timeout, timeout,
        JOBFIT_CLI.token and ("-H " .. shell_quote("Authorization: Bearer " .. JOBFIT_CLI.token) .. " ") or "",
        shell_quote(tmp), shell_quote(JOBFIT_CLI.url)
    )
    local pipe = io.popen(cmd, "r")
    local out = pipe and pipe:read("a") or ""
    if pipe then
        pipe:close()
    end
    os.remove(tmp)
    local payload, code = string.match(out, "^(.*)\n(%d%d%d)$")
    if code ~= "200" then
        return nil, "no answer (HTTP " .. tostring(code) .. ")"
    end
    local ok, answer = pcall(decode, payload)
    if not ok or type(answer) ~= "table" then
        return nil, "malformed answer"
    end
    return answer
end

local function advise(options)
    local answer, why = post(request_body(options))
    if not answer then
        if slurm.log_debug then
            slurm.log_debug("jobfit: %s", why)
        end
        return
    end
    if answer.status ~= "ok" or type(answer.flags) ~= "table" or #answer.flags == 0 then
        return
    end
    local flags = {}
    for _, f in ipairs(answer.flags) do
        if type(f) == "string" then
            flags[#flags + 1] = f
        end
    end
    local line = "jobfit: from " .. tostring(math.tointeger(answer.history_jobs) or "your") .. " finished jobs, this job needs about: #SBATCH " .. table.concat(flags, " ")
    local saving = type(answer.expected_saving) == "table" and tonumber(answer.expected_saving.usd)
    if saving and saving > 0 then
        line = line .. string.format(" (saves about $%.2f per run)", saving)
    end
    slurm.log_info("%s", line)
end

function slurm_cli_setup_defaults(options, early)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, pack_offset)
    local ok, err = pcall(advise, options)
    if not ok and slurm.log_debug then
        pcall(slurm.log_debug, "jobfit: advice skipped: %s", tostring(err))
    end
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
    return slurm.SUCCESS
end

return slurm.SUCCESS
