// MainActivity.kt: the demo Activity: copies the bundle from assets/bundle to app storage once, opens MagicSelector on a worker thread and shows a short dialogue's selections.
package com.magicselector.demo

import android.app.Activity
import android.os.Bundle
import android.widget.ScrollView
import android.widget.TextView
import com.magicselector.MagicSelector
import com.magicselector.MagicSelectorException
import com.magicselector.Turn
import java.io.File

class MainActivity : Activity() {
    private lateinit var log: TextView

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        log = TextView(this).apply { setPadding(32, 32, 32, 32) }
        setContentView(ScrollView(this).apply { addView(log) })
        Thread { runDialogue() }.start()  // opening the bundle reads ~60 MB: never on the UI thread
    }

    private fun show(line: String) = runOnUiThread { log.append(line + "\n") }

    /** assets/bundle -> filesDir/bundle (the core opens a folder; assets are not files). */
    private fun bundleDir(): File {
        val dir = File(filesDir, "bundle")
        if (File(dir, "manifest.json").isFile) return dir  // a new app version: delete and copy again
        fun copy(path: String, to: File) {
            val children = assets.list(path).orEmpty()
            if (children.isEmpty()) {
                to.parentFile?.mkdirs()
                assets.open(path).use { input -> to.outputStream().use { input.copyTo(it) } }
            } else {
                children.forEach { copy("$path/$it", File(to, it)) }
            }
        }
        copy("bundle", dir)
        return dir
    }

    private fun runDialogue() {
        try {
            MagicSelector.open(bundleDir().path, "{\"threads\":2}").use { selector ->
                val history = mutableListOf<Turn>()
                for ((user, assistant) in listOf("play some jazz" to "Playing jazz.",
                                                 "and turn the volume down" to "Volume lowered.",
                                                 "text Maria that I'm running late" to "Sent.")) {
                    val t0 = System.nanoTime()
                    val sel = selector.select(user, history, maxTools = 5)
                    show("$user -> ${sel.ids.joinToString()} (K=${sel.k}, ${(System.nanoTime() - t0) / 1_000_000} ms)")
                    history += Turn("user", user)
                    history += Turn("assistant", assistant)
                }
            }
        } catch (e: MagicSelectorException) {
            show("error ${e.status}: ${e.message}")
        }
    }
}
