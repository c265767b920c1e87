// MagicSelector.kt: the Kotlin class an app calls: open a bundle, select a turn (with history and a budget), close; over the C API through libmagicselector_jni.
package com.magicselector

/** A failed call of the native core: [status] is the C API's ms_status, the message names the field. */
class MagicSelectorException(val status: Int, message: String) : RuntimeException(message) {
    companion object {
        const val ARGUMENT = 1
        const val INPUT = 2
        const val BUNDLE = 3
        const val UNSUPPORTED = 4
        const val UNKNOWN_TOOL = 5
        const val INTERNAL = 6
    }
}

/** One earlier message of the dialogue. */
data class Turn(val role: String, val content: String)

/** A turn's selection: the kept tool ids in order and the whole Selection as the core's JSON. */
class Selection(val ids: List<String>, val k: Int, val json: String)

/**
 * The native selection core. `MagicSelector.open(bundleDir).use { it.select("turn on bluetooth") }`.
 *
 * One instance serves one thread at a time (calls are synchronized); open one per thread for
 * parallel turns. Every failure is a [MagicSelectorException] carrying the C API's status and message.
 * (Closeable, not only AutoCloseable, so that Kotlin's `use` needs no kotlin-stdlib-jdk7.)
 */
class MagicSelector private constructor(private var handle: Long) : java.io.Closeable {

    /** The Selection JSON for a request in the C API's shape ({query, history, max_tools, max_schema_tokens, format}). */
    @Synchronized
    fun selectJson(requestJson: String): String {
        check(handle != 0L) { "the selector is closed" }
        return nativeSelect(handle, requestJson)
    }

    /** One turn: [query] with the dialogue so far; [maxTools] / [maxSchemaTokens] bound what is handed to the LLM (null: the selector's own, five tools unless opened with {"max_tools": null}). */
    fun select(query: String, history: List<Turn> = emptyList(), maxTools: Int? = null,
               maxSchemaTokens: Int? = null, format: String = "mcp"): Selection {
        val request = buildString {
            append("{\"query\":").append(quote(query)).append(",\"history\":[")
            history.forEachIndexed { i, t ->
                if (i > 0) append(',')
                append("{\"role\":").append(quote(t.role)).append(",\"content\":").append(quote(t.content)).append('}')
            }
            append("],\"max_tools\":").append(maxTools?.toString() ?: "null")
            append(",\"max_schema_tokens\":").append(maxSchemaTokens?.toString() ?: "null")
            append(",\"format\":").append(quote(format)).append('}')
        }
        val json = selectJson(request)
        return Selection(idsOf(json), kOf(json), json)
    }

    @Synchronized
    override fun close() {
        if (handle != 0L) {
            nativeClose(handle)
            handle = 0L
        }
    }

    companion object {
        init {
            System.loadLibrary("magicselector_jni")
        }

        /** Opens the bundle folder; [optionsJson] holds SelectorConfig settings the core honours ({"threads": 2}). */
        @JvmStatic
        @JvmOverloads
        fun open(bundleDir: String, optionsJson: String? = null): MagicSelector =
            MagicSelector(nativeOpen(bundleDir, optionsJson))

        @JvmStatic private external fun nativeOpen(bundleDir: String, optionsJson: String?): Long
        @JvmStatic private external fun nativeSelect(handle: Long, requestJson: String): String
        @JvmStatic private external fun nativeClose(handle: Long)

        /** A JSON string literal (RFC 8259 escapes). */
        fun quote(s: String): String = buildString(s.length + 2) {
            append('"')
            for (c in s) {
                when {
                    c == '"' -> append("\\\"")
                    c == '\\' -> append("\\\\")
                    c < ' ' -> append(String.format("\\u%04x", c.toInt()))
                    else -> append(c)
                }
            }
            append('"')
        }

        // The Selection's "tools": [{"id": ...}] in order, read without a JSON library (the desktop JVM
        // has none; an app parses `json` with its own). The core writes `"id":"..."` only in tools.
        private val ID = Regex("\"id\":\"((?:[^\"\\\\]|\\\\.)*)\"")
        private val K = Regex("\"k\":(\\d+)")

        internal fun idsOf(json: String): List<String> = ID.findAll(json).map { unquote(it.groupValues[1]) }.toList()

        internal fun kOf(json: String): Int = K.find(json)?.groupValues?.get(1)?.toInt() ?: -1

        private fun unquote(s: String): String {
            if ('\\' !in s) return s
            val out = StringBuilder()
            var i = 0
            while (i < s.length) {
                val c = s[i]
                if (c == '\\' && i + 1 < s.length && s[i + 1] == 'u' && i + 6 <= s.length) {
                    out.append(s.substring(i + 2, i + 6).toInt(16).toChar())
                    i += 6
                } else if (c == '\\' && i + 1 < s.length) {
                    when (val e = s[i + 1]) {
                        'n' -> out.append('\n')
                        't' -> out.append('\t')
                        'r' -> out.append('\r')
                        'b' -> out.append('\b')
                        'f' -> out.append('\u000c')
                        else -> out.append(e)
                    }
                    i += 2
                } else {
                    out.append(c); i++
                }
            }
            return out.toString()
        }
    }
}
