// SelectMain.kt: a plain Kotlin main over the MagicSelector class on the desktop JVM: request lines in, Selection or error lines out (tests/test_jni_binding.py drives it).
//
//   java -Djava.library.path=DIR_OF_libmagicselector_jni.so -cp select.jar SelectMainKt BUNDLE [--dialogue]
//
// Each stdin line is a C API request ({query, history, max_tools, max_schema_tokens, format}); each
// stdout line is the Selection JSON or {"error": {"status": N, "message": "..."}}. With --dialogue it
// runs a two-turn dialogue through the typed select(query, history, maxTools) instead and prints the
// kept ids of each turn. Exit 2 when the bundle does not open.
import com.magicselector.MagicSelector
import com.magicselector.MagicSelectorException
import com.magicselector.Turn

fun errorLine(e: MagicSelectorException): String =
    "{\"error\":{\"status\":${e.status},\"message\":${MagicSelector.quote(e.message ?: "")}}}"

fun main(args: Array<String>) {
    if (args.isEmpty()) {
        System.err.println("usage: SelectMainKt BUNDLE [--dialogue]")
        System.exit(2)
    }
    val selector = try {
        MagicSelector.open(args[0], "{\"threads\":1}")
    } catch (e: MagicSelectorException) {
        println(errorLine(e))
        System.exit(2)
        return
    }
    selector.use { sel ->
        if (args.size > 1 && args[1] == "--dialogue") {
            val first = sel.select("play some jazz")
            println("turn 1: k=${first.k} ids=${first.ids.joinToString(",")}")
            val history = listOf(Turn("user", "play some jazz"), Turn("assistant", "Playing jazz."))
            val second = sel.select("and turn the volume down", history, maxTools = 2)
            println("turn 2: k=${second.k} ids=${second.ids.joinToString(",")}")
        } else while (true) {
            val line = readLine() ?: break
            if (line.isBlank()) continue
            try {
                println(sel.selectJson(line))
            } catch (e: MagicSelectorException) {
                println(errorLine(e))
            }
        }
    }
    try {
        selector.selectJson("{\"query\":\"hi\"}")
        println("closed: no error")
    } catch (e: IllegalStateException) {
        println("closed: ${e.message}")
    }
}
